import json
import random

ROOMS = ["living_room", "bedroom", "kitchen", "office", "nursery", "basement"]
EXTRA_DEVICES = ["fan", "tv", "lamp", "speaker", "humidifier", "heater"]
MODES = ["off", "heat", "cool", "auto"]
# rooms, thermostat goals, device goals, Fahrenheit targets, coldest-room goal
LEVELS = [[2, 1, 1, False, False], [3, 1, 2, False, False], [3, 2, 2, True, False], [4, 2, 2, True, True]]


def as_number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and -10 ** 6 < value < 10 ** 6:
        return float(value)
    if isinstance(value, float) and -1e6 < value < 1e6:
        return value
    if isinstance(value, str):
        text = value.strip().lower().replace("°", "").rstrip("c").strip()
        try:
            v = float(text)
        except ValueError:
            return None
        if -1e6 < v < 1e6:
            return v
    return None


def show(v):
    if v == int(v):
        return str(int(v))
    return str(v)


def nice(room):
    return room.replace("_", " ")


class Env:
    """Bring a smart home to a requested target state through its controller API: rooms have a thermostat (mode off/heat/cool/auto, setpoint in degrees Celsius, current reading) and switchable devices whose states are hidden until queried; the agent calls get_status(room), set_mode(room, mode), set_temperature(room, celsius), toggle_device(room, device) and finish() as JSON tool calls such as {"name": "toggle_device", "arguments": {"room": "kitchen", "device": "fan"}}; toggles flip a device so its state must be checked first, a thermostat that is off refuses setpoints until a mode is chosen, harder seeds add rooms, targets given in Fahrenheit and a goal that depends on which room is coldest, and finish ends the episode paying 1.0 only when every goal holds and nothing else was changed."""

    name = "SmartHomeTargetState"
    setting = "tool_use"
    max_turns = 20
    tools = [
        {"type": "function", "function": {
            "name": "get_status",
            "description": "Show one room: thermostat mode, setpoint (C), current temperature reading (C) and each device on/off.",
            "parameters": {"type": "object",
                           "properties": {"room": {"type": "string", "description": "Room name, e.g. kitchen."}},
                           "required": ["room"]}}},
        {"type": "function", "function": {
            "name": "set_mode",
            "description": "Set a room's thermostat mode.",
            "parameters": {"type": "object",
                           "properties": {"room": {"type": "string"},
                                          "mode": {"type": "string", "enum": ["off", "heat", "cool", "auto"]}},
                           "required": ["room", "mode"]}}},
        {"type": "function", "function": {
            "name": "set_temperature",
            "description": "Set a room's setpoint in degrees Celsius (10 to 32, rounded to 0.5); refused while the thermostat is off.",
            "parameters": {"type": "object",
                           "properties": {"room": {"type": "string"},
                                          "celsius": {"type": "number"}},
                           "required": ["room", "celsius"]}}},
        {"type": "function", "function": {
            "name": "toggle_device",
            "description": "Flip one device in a room: on becomes off, off becomes on.",
            "parameters": {"type": "object",
                           "properties": {"room": {"type": "string"},
                                          "device": {"type": "string"}},
                           "required": ["room", "device"]}}},
        {"type": "function", "function": {
            "name": "finish",
            "description": "Declare the target state reached; ends the episode.",
            "parameters": {"type": "object", "properties": {}, "required": []}}},
    ]

    def __init__(self):
        self.level = 0
        self.rooms = []
        self.state = {}
        self.initial = {}
        self.goals = []
        self.turn = 0
        self.finished = False

    def reset(self, seed):
        rng = random.Random(seed)
        self.level = rng.randint(0, 3)
        n_rooms, n_thermo, n_dev, fahrenheit, coldest = LEVELS[self.level]
        self.rooms = rng.sample(ROOMS, n_rooms)
        self.state = {}
        readings = rng.sample(range(30, 50), n_rooms)
        for i, room in enumerate(self.rooms):
            devices = {"lights": rng.random() < 0.5}
            for d in sorted(rng.sample(EXTRA_DEVICES, rng.randint(1, 2))):
                devices[d] = rng.random() < 0.5
            mode = rng.choice(MODES)
            self.state[room] = {"mode": mode, "setpoint": rng.randint(34, 50) / 2.0,
                                "reading": readings[i] / 2.0, "devices": devices}
        self.goals = []
        thermo_rooms = rng.sample(self.rooms, n_thermo)
        for room in thermo_rooms:
            cur = self.state[room]
            if rng.random() < 0.2 and cur["mode"] != "off":
                self.goals.append({"kind": "off", "room": room})
                continue
            mode = rng.choice(["heat", "cool", "auto"])
            if fahrenheit and rng.random() < 0.7:
                f = rng.randint(61, 79)
                celsius = (f - 32) * 5 / 9.0
                self.goals.append({"kind": "temp", "room": room, "mode": mode, "celsius": celsius, "f": f})
            else:
                celsius = rng.randint(36, 52) / 2.0
                while celsius == cur["setpoint"] and mode == cur["mode"]:
                    celsius = rng.randint(36, 52) / 2.0
                self.goals.append({"kind": "temp", "room": room, "mode": mode, "celsius": celsius, "f": None})
        used = []
        if coldest:
            cold = min(self.rooms, key=lambda r: self.state[r]["reading"])
            self.goals.append({"kind": "cold", "room": cold, "device": "lights", "on": True})
            used.append([cold, "lights"])
        pairs = []
        for room in self.rooms:
            for d in sorted(self.state[room]["devices"].keys()):
                if [room, d] not in used:
                    pairs.append([room, d])
        for room, d in rng.sample(pairs, n_dev):
            want = rng.random() < 0.5
            self.goals.append({"kind": "device", "room": room, "device": d, "on": want})
        if not any(not self._goal_met(g) for g in self.goals):
            g = [x for x in self.goals if x["kind"] == "device"][0]
            g["on"] = not g["on"]
        self.initial = self._snapshot()
        self.turn = 0
        self.finished = False
        lines = []
        for g in self.goals:
            lines.append("- " + self._goal_text(g))
        rooms_text = "; ".join(nice(r) + " (" + ", ".join(sorted(self.state[r]["devices"].keys())) + ")"
                               for r in self.rooms)
        obs = ("You control a smart home. Rooms and their devices: " + rooms_text
               + ". Thermostat modes and device states are hidden until you call get_status.\n"
               + "Target state:\n" + "\n".join(lines) + "\n"
               + "Leave everything else as it is, then call finish(). Toggling flips a device; a thermostat that is off "
               + "refuses setpoints until you set a mode. Setpoints are in Celsius, rounded to 0.5.\n"
               + "Tools: get_status(room), set_mode(room, mode), set_temperature(room, celsius), "
               + "toggle_device(room, device), finish(). Reply with one JSON tool call, e.g. {\"name\": \"get_status\", "
               + "\"arguments\": {\"room\": \"" + self.rooms[0] + "\"}}. You have " + str(self.max_turns) + " calls.")
        info = {"difficulty": self.level, "rooms": list(self.rooms), "goals": len(self.goals)}
        return obs, info

    def _goal_text(self, g):
        if g["kind"] == "off":
            return "the " + nice(g["room"]) + " thermostat is off"
        if g["kind"] == "temp":
            where = "the " + nice(g["room"]) + " thermostat is in " + g["mode"] + " mode set to "
            if g["f"] is not None:
                return where + str(g["f"]) + " F (nearest 0.5 C)"
            return where + show(g["celsius"]) + " C"
        if g["kind"] == "cold":
            return "the lights are on in the room whose current temperature reading is lowest"
        verb = " are " if g["device"] == "lights" else " is "
        return "the " + nice(g["room"]) + " " + g["device"] + verb + ("on" if g["on"] else "off")

    def _goal_met(self, g):
        st = self.state[g["room"]]
        if g["kind"] == "off":
            return st["mode"] == "off"
        if g["kind"] == "temp":
            return st["mode"] == g["mode"] and abs(st["setpoint"] - g["celsius"]) <= 0.26
        return st["devices"][g["device"]] == g["on"]

    def _snapshot(self):
        snap = {}
        for room in self.rooms:
            st = self.state[room]
            snap[room] = {"mode": st["mode"], "setpoint": st["setpoint"], "devices": dict(st["devices"])}
        return snap

    def _info(self, error):
        return {"difficulty": self.level, "turn": self.turn, "error": error,
                "goals_met": sum(1 for g in self.goals if self._goal_met(g))}

    def _end(self, obs, error):
        truncated = self.turn >= self.max_turns
        if truncated:
            self.finished = True
            obs = obs + " Out of calls."
        return obs, 0.0, False, truncated, self._info(error)

    def _room(self, args):
        room = args.get("room")
        if not isinstance(room, str):
            return None
        room = room.strip().lower().replace(" ", "_")
        return room if room in self.state else None

    def _room_error(self):
        return self._end("Error: unknown room. Rooms: " + ", ".join(self.rooms) + ".", True)

    def _side_effects(self):
        """Changes to anything no goal mentions."""
        changed = []
        for room in self.rooms:
            st = self.state[room]
            old = self.initial[room]
            thermo_goal = any(g["room"] == room and g["kind"] in ["off", "temp"] for g in self.goals)
            if not thermo_goal and (st["mode"] != old["mode"] or st["setpoint"] != old["setpoint"]):
                changed.append(nice(room) + " thermostat")
            for d in sorted(st["devices"].keys()):
                goal = any(g["room"] == room and g["kind"] in ["device", "cold"] and g["device"] == d for g in self.goals)
                if not goal and st["devices"][d] != old["devices"][d]:
                    changed.append(nice(room) + " " + d)
        return changed

    def step(self, action):
        if self.finished:
            return "The episode is over.", 0.0, True, False, self._info(False)
        self.turn += 1
        try:
            call = json.loads(str(action))
        except (ValueError, RecursionError):
            return self._end("Error: the action is not valid JSON; send {\"name\": ..., \"arguments\": {...}}.", True)
        if not isinstance(call, dict):
            return self._end("Error: the tool call must be a JSON object with name and arguments.", True)
        name = call.get("name")
        args = call.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except (ValueError, RecursionError):
                args = None
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return self._end("Error: arguments must be a JSON object.", True)
        if name == "get_status":
            room = self._room(args)
            if room is None:
                return self._room_error()
            st = self.state[room]
            devs = ", ".join(d + " " + ("on" if st["devices"][d] else "off") for d in sorted(st["devices"].keys()))
            return self._end(room + ": thermostat " + st["mode"] + ", setpoint " + show(st["setpoint"])
                             + " C, reading " + show(st["reading"]) + " C; devices: " + devs + ".", False)
        if name == "set_mode":
            room = self._room(args)
            if room is None:
                return self._room_error()
            mode = args.get("mode")
            mode = mode.strip().lower() if isinstance(mode, str) else None
            if mode not in MODES:
                return self._end("Error: mode must be off, heat, cool or auto.", True)
            self.state[room]["mode"] = mode
            return self._end(room + " thermostat mode set to " + mode + ".", False)
        if name == "set_temperature":
            room = self._room(args)
            if room is None:
                return self._room_error()
            value = as_number(args.get("celsius"))
            if value is None:
                return self._end("Error: celsius must be a number.", True)
            if value < 10 or value > 32:
                return self._end("Error: setpoints must be between 10 and 32 C.", True)
            if self.state[room]["mode"] == "off":
                return self._end("Error: the " + room + " thermostat is off; set a mode first.", True)
            setpoint = round(value * 2) / 2.0
            self.state[room]["setpoint"] = setpoint
            return self._end(room + " setpoint set to " + show(setpoint) + " C.", False)
        if name == "toggle_device":
            room = self._room(args)
            if room is None:
                return self._room_error()
            device = args.get("device")
            device = device.strip().lower() if isinstance(device, str) else None
            devices = self.state[room]["devices"]
            if device not in devices:
                return self._end("Error: " + room + " has no such device; it has " + ", ".join(sorted(devices.keys())) + ".", True)
            devices[device] = not devices[device]
            verb = " are now " if device == "lights" else " is now "
            return self._end(room + " " + device + verb + ("on" if devices[device] else "off") + ".", False)
        if name == "finish":
            self.finished = True
            unmet = [self._goal_text(g) for g in self.goals if not self._goal_met(g)]
            if unmet:
                return ("Finished, but not every goal holds (" + str(len(unmet)) + " unmet). Task failed.",
                        0.0, True, False, self._info(False))
            changed = self._side_effects()
            if changed:
                return ("Finished, but things outside the target were changed: " + ", ".join(changed) + ". Task failed.",
                        0.0, True, False, self._info(False))
            return "Target state reached. Task complete.", 1.0, True, False, self._info(False)
        return self._end("Error: unknown tool; use get_status, set_mode, set_temperature, toggle_device or finish.", True)

    def hint(self):
        parts = []
        for g in self.goals:
            if g["kind"] == "temp" and g["f"] is not None:
                parts.append(str(g["f"]) + " F is " + show(round(g["celsius"] * 2) / 2.0) + " C to the nearest 0.5")
        met = sum(1 for g in self.goals if g["kind"] in ["device", "cold"] and self._goal_met(g))
        total = sum(1 for g in self.goals if g["kind"] in ["device", "cold"])
        text = ("Call get_status on a room before toggling anything there: right now " + str(met) + " of the "
                + str(total) + " device goals already hold, and toggling those would undo them.")
        if any(g["kind"] == "temp" for g in self.goals):
            text += " For thermostat goals set the mode before the setpoint."
        if parts:
            text += " " + "; ".join(parts) + "."
        return text

    def oracle(self):
        for g in self.goals:
            if self._goal_met(g):
                continue
            room = g["room"]
            if g["kind"] == "off":
                return json.dumps({"name": "set_mode", "arguments": {"room": room, "mode": "off"}})
            if g["kind"] == "temp":
                if self.state[room]["mode"] != g["mode"]:
                    return json.dumps({"name": "set_mode", "arguments": {"room": room, "mode": g["mode"]}})
                return json.dumps({"name": "set_temperature",
                                   "arguments": {"room": room, "celsius": round(g["celsius"] * 2) / 2.0}})
            return json.dumps({"name": "toggle_device", "arguments": {"room": room, "device": g["device"]}})
        return json.dumps({"name": "finish", "arguments": {}})
