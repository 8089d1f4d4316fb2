import json
import random

AIRPORTS = ["BOS", "JFK", "ORD", "DEN", "SFO", "SEA", "ATL", "MIA", "LAX", "AUS", "PHX", "DCA"]
AIRLINES = ["UA", "DL", "AA", "B6", "AS", "WN", "NK"]
FIRST = ["Maria", "Kenji", "Aisha", "Lukas", "Priya", "Tomas", "Chen", "Fatima", "Oscar", "Ingrid"]
LAST = ["Okafor", "Lindqvist", "Tanaka", "Moreau", "Silva", "Novak", "Haddad", "Kowalski", "Reyes", "Brennan"]
BAG_FEE = 35


def fmt(minutes):
    h = minutes // 60
    m = minutes % 60
    return ("0" if h < 10 else "") + str(h) + ":" + ("0" if m < 10 else "") + str(m)


def as_whole_number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and -1e15 < value < 1e15 and value == int(value):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) < 6:
        return int(value.strip())
    return None


def clean(value):
    return value.strip().upper() if isinstance(value, str) else None


class Env:
    """Book air travel that satisfies a traveller's seeded constraints through a stateful booking API: search_flights(origin, destination, date) lists flights (unsorted by price) with departure time, stops and fare, book_flight(flight_id, passenger) returns a booking id, add_baggage(booking_id, bags) sets checked bags, cancel_booking(booking_id) undoes a mistake and confirm(booking_id) finalises a booking; calls are JSON such as {"name": "search_flights", "arguments": {"origin": "BOS", "destination": "SFO", "date": "2025-06-12"}}; depending on the seeded difficulty the agent must find the cheapest flight, then the cheapest within a departure window, then also under a stop limit, then a round trip with a different rule per leg, book it under the traveller's exact name, set the baggage and confirm; confirm refuses bookings that break the request with an explanation, and the episode pays 1.0 once every required leg is confirmed."""

    name = "TravelBookingConstraints"
    setting = "tool_use"
    max_turns = 20
    tools = [
        {"type": "function", "function": {
            "name": "search_flights",
            "description": "List the flights on a route and date: flight id, departure and arrival time, stops and fare in dollars.",
            "parameters": {"type": "object",
                           "properties": {"origin": {"type": "string", "description": "Airport code, e.g. BOS."},
                                          "destination": {"type": "string"},
                                          "date": {"type": "string", "description": "YYYY-MM-DD"}},
                           "required": ["origin", "destination", "date"]}}},
        {"type": "function", "function": {
            "name": "book_flight",
            "description": "Hold a seat on a flight for a passenger; returns a booking id (not yet confirmed).",
            "parameters": {"type": "object",
                           "properties": {"flight_id": {"type": "string"},
                                          "passenger": {"type": "string", "description": "Full name as given by the traveller."}},
                           "required": ["flight_id", "passenger"]}}},
        {"type": "function", "function": {
            "name": "add_baggage",
            "description": "Set the number of checked bags (0-3) on a booking; each bag costs $" + str(BAG_FEE) + ".",
            "parameters": {"type": "object",
                           "properties": {"booking_id": {"type": "string"},
                                          "bags": {"type": "integer", "minimum": 0, "maximum": 3}},
                           "required": ["booking_id", "bags"]}}},
        {"type": "function", "function": {
            "name": "cancel_booking",
            "description": "Cancel an unconfirmed booking.",
            "parameters": {"type": "object",
                           "properties": {"booking_id": {"type": "string"}},
                           "required": ["booking_id"]}}},
        {"type": "function", "function": {
            "name": "confirm",
            "description": "Confirm and pay for a booking; refused if it does not match the traveller's request.",
            "parameters": {"type": "object",
                           "properties": {"booking_id": {"type": "string"}},
                           "required": ["booking_id"]}}},
    ]

    def __init__(self):
        self.level = 0
        self.turn = 0
        self.finished = False
        self.passenger = ""
        self.bags = 0
        self.legs = []
        self.flights = {}
        self.bookings = {}
        self.searched = []
        self.next_booking = 100

    def _make_leg(self, rng, origin, dest, date, rule):
        """Generate flights for one leg until the rule picks a unique cheapest flight that a naive 'cheapest overall' misses when the rule has conditions."""
        for _ in range(300):
            flights = []
            n = rng.randint(5, 8)
            used = []
            for _k in range(n):
                fid = rng.choice(AIRLINES) + str(rng.randint(100, 999))
                while fid in used or fid in self.flights:
                    fid = rng.choice(AIRLINES) + str(rng.randint(100, 999))
                used.append(fid)
                dep = rng.randint(12, 42) * 30
                stops = rng.choice([0, 0, 1, 1, 2])
                dur = rng.randint(150, 330) + 70 * stops
                price = rng.randint(16, 120) * 5
                if stops > 0:
                    price = max(60, price - 40 * stops)
                flights.append([fid, dep, dep + dur, stops, price])
            ok = [f for f in flights if self._fits(f, rule)]
            if not ok:
                continue
            ok.sort(key=lambda f: f[4])
            if len(ok) > 1 and ok[0][4] == ok[1][4]:
                continue
            cheapest = min(flights, key=lambda f: f[4])
            same_price = [f for f in flights if f[4] == cheapest[4]]
            if len(same_price) > 1:
                continue
            if (rule["before"] or rule["after"] or rule["max_stops"] is not None) and cheapest[0] == ok[0][0]:
                continue
            flights.sort(key=lambda f: [f[1], f[0]])
            for f in flights:
                self.flights[f[0]] = {"origin": origin, "dest": dest, "date": date, "dep": f[1], "arr": f[2],
                                      "stops": f[3], "price": f[4]}
            return ok[0][0]
        return ""

    def _fits(self, f, rule):
        if rule["before"] and f[1] >= rule["before"]:
            return False
        if rule["after"] and f[1] < rule["after"]:
            return False
        if rule["max_stops"] is not None and f[3] > rule["max_stops"]:
            return False
        return True

    def _rule(self, rng, kind):
        rule = {"before": 0, "after": 0, "max_stops": None}
        if kind >= 1:
            if rng.random() < 0.6:
                rule["before"] = rng.choice([11, 12, 13]) * 60
            else:
                rule["after"] = rng.choice([14, 15, 16]) * 60
        if kind >= 2:
            rule["max_stops"] = rng.choice([0, 1])
        return rule

    def _rule_text(self, rule):
        parts = []
        if rule["before"]:
            parts.append("departing before " + fmt(rule["before"]))
        if rule["after"]:
            parts.append("departing at or after " + fmt(rule["after"]))
        if rule["max_stops"] is not None:
            parts.append("nonstop" if rule["max_stops"] == 0 else "with at most 1 stop")
        if not parts:
            return "the cheapest flight"
        return "the cheapest flight " + " and ".join(parts)

    def reset(self, seed):
        rng = random.Random(seed)
        self.level = rng.randint(0, 3)
        self.turn = 0
        self.finished = False
        self.flights = {}
        self.bookings = {}
        self.searched = []
        self.next_booking = rng.randint(100, 899)
        self.passenger = rng.choice(FIRST) + " " + rng.choice(LAST)
        self.bags = [0, rng.randint(1, 2), rng.randint(1, 3), rng.randint(1, 2)][self.level]
        a, b = rng.sample(AIRPORTS, 2)
        month = rng.randint(1, 12)
        day = rng.randint(1, 20)
        d1 = "2025-" + ("0" if month < 10 else "") + str(month) + "-" + ("0" if day < 10 else "") + str(day)
        d2 = "2025-" + ("0" if month < 10 else "") + str(month) + "-" + ("0" if day + 5 < 10 else "") + str(day + 5)
        self.legs = []
        kinds = [[0], [1], [2], [1 + rng.randint(0, 1), 1 + rng.randint(0, 1)]][self.level]
        routes = [[a, b, d1], [b, a, d2]]
        for i, kind in enumerate(kinds):
            rule = self._rule(rng, kind)
            target = ""
            while not target:
                target = self._make_leg(rng, routes[i][0], routes[i][1], routes[i][2], rule)
                if not target:
                    rule = self._rule(rng, kind)
            self.legs.append({"origin": routes[i][0], "dest": routes[i][1], "date": routes[i][2],
                              "rule": rule, "target": target, "confirmed": ""})
        lines = []
        for i, leg in enumerate(self.legs):
            label = ["Outbound", "Return"][i] if len(self.legs) > 1 else "Flight"
            lines.append(label + ": " + leg["origin"] + " to " + leg["dest"] + " on " + leg["date"] + ", "
                         + self._rule_text(leg["rule"]) + ".")
        bag_text = ("No checked bags." if self.bags == 0 else
                    str(self.bags) + " checked bag" + ("s" if self.bags > 1 else "") + " on every flight.")
        obs = ("You are a travel agent. Traveller: " + self.passenger + " (book under exactly this name).\n"
               + "Request: " + " ".join(lines) + " " + bag_text
               + " Book, set the baggage, then confirm each booking.\n"
               + "Tools: search_flights(origin, destination, date), book_flight(flight_id, passenger), "
               + "add_baggage(booking_id, bags), cancel_booking(booking_id), confirm(booking_id). "
               + "Reply with one JSON tool call, e.g. {\"name\": \"search_flights\", \"arguments\": {\"origin\": \""
               + self.legs[0]["origin"] + "\", \"destination\": \"" + self.legs[0]["dest"] + "\", \"date\": \""
               + self.legs[0]["date"] + "\"}}. You have " + str(self.max_turns) + " calls.")
        info = {"difficulty": self.level, "legs": len(self.legs), "bags": self.bags}
        return obs, info

    def _info(self, error):
        return {"difficulty": self.level, "turn": self.turn, "error": error,
                "legs_confirmed": len([x for x in self.legs if x["confirmed"]]), "legs": len(self.legs)}

    def _reply(self, obs, error):
        truncated = self.turn >= self.max_turns
        if truncated:
            self.finished = True
            obs = obs + " Out of calls."
        return obs, 0.0, False, truncated, self._info(error)

    def _booking(self, value):
        if isinstance(value, int) and not isinstance(value, bool):
            value = "BK-" + str(value)
        v = clean(value)
        if v and v.isdigit():
            v = "BK-" + v
        return v if v in self.bookings else None

    def _leg_of(self, fid):
        f = self.flights[fid]
        for i, leg in enumerate(self.legs):
            if f["origin"] == leg["origin"] and f["dest"] == leg["dest"] and f["date"] == leg["date"]:
                return i
        return -1

    def step(self, action):
        if self.finished:
            return "The episode is over.", 0.0, True, False, self._info(False)
        self.turn += 1
        try:
            call = json.loads(str(action))
        except (ValueError, RecursionError):
            return self._reply("Error: the action is not valid JSON; send {\"name\": ..., \"arguments\": {...}}.", True)
        if not isinstance(call, dict):
            return self._reply("Error: the tool call must be a JSON object with name and arguments.", True)
        name = call.get("name")
        args = call.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except (ValueError, RecursionError):
                args = None
        if not isinstance(args, dict):
            return self._reply("Error: arguments must be a JSON object.", True)
        if name == "search_flights":
            o = clean(args.get("origin"))
            d = clean(args.get("destination"))
            date = args.get("date")
            date = date.strip() if isinstance(date, str) else None
            if not o or not d or not date:
                return self._reply("Error: search_flights needs origin, destination (airport codes) and date (YYYY-MM-DD).", True)
            rows = []
            for fid in sorted(self.flights, key=lambda k: [self.flights[k]["dep"], k]):
                f = self.flights[fid]
                if f["origin"] == o and f["dest"] == d and f["date"] == date:
                    stops = "nonstop" if f["stops"] == 0 else (str(f["stops"]) + " stop" + ("s" if f["stops"] > 1 else ""))
                    rows.append(fid + " dep " + fmt(f["dep"]) + " arr " + fmt(f["arr"] % 1440)
                                + (" (+1 day)" if f["arr"] >= 1440 else "") + ", " + stops + ", $" + str(f["price"]))
            key = o + "-" + d + "-" + date
            if not rows:
                return self._reply("No flights found from " + o + " to " + d + " on " + date + ".", False)
            if key not in self.searched:
                self.searched.append(key)
            return self._reply("Flights " + o + " to " + d + " on " + date + ":\n" + "\n".join(rows), False)
        if name == "book_flight":
            fid = clean(args.get("flight_id"))
            pax = args.get("passenger")
            if fid not in self.flights:
                return self._reply("Error: unknown flight id; use an id from search_flights (like UA123).", True)
            if not isinstance(pax, str) or not pax.strip() or len(pax) > 60:
                return self._reply("Error: passenger must be the traveller's full name.", True)
            bid = "BK-" + str(self.next_booking)
            self.next_booking += 13
            self.bookings[bid] = {"flight": fid, "passenger": " ".join(pax.split()), "bags": 0,
                                  "state": "held"}
            f = self.flights[fid]
            return self._reply("Booking " + bid + " held: " + fid + " " + f["origin"] + "-" + f["dest"] + " " + f["date"]
                               + " for " + " ".join(pax.split()) + ", fare $" + str(f["price"]) + ", 0 bags. Not yet confirmed.", False)
        if name == "add_baggage":
            bid = self._booking(args.get("booking_id"))
            bags = as_whole_number(args.get("bags"))
            if bid is None:
                return self._reply("Error: no such booking; booking ids look like BK-123.", True)
            if bags is None or bags < 0 or bags > 3:
                return self._reply("Error: bags must be a whole number from 0 to 3.", True)
            b = self.bookings[bid]
            if b["state"] != "held":
                return self._reply("Error: " + bid + " is " + b["state"] + " and can no longer be changed.", True)
            b["bags"] = bags
            total = self.flights[b["flight"]]["price"] + BAG_FEE * bags
            return self._reply(bid + " now has " + str(bags) + " checked bag" + ("" if bags == 1 else "s") + "; total $" + str(total) + ".", False)
        if name == "cancel_booking":
            bid = self._booking(args.get("booking_id"))
            if bid is None:
                return self._reply("Error: no such booking; booking ids look like BK-123.", True)
            b = self.bookings[bid]
            if b["state"] != "held":
                return self._reply("Error: " + bid + " is " + b["state"] + " and cannot be cancelled.", True)
            b["state"] = "cancelled"
            return self._reply("Cancelled " + bid + ".", False)
        if name == "confirm":
            bid = self._booking(args.get("booking_id"))
            if bid is None:
                return self._reply("Error: no such booking; booking ids look like BK-123.", True)
            b = self.bookings[bid]
            if b["state"] != "held":
                return self._reply("Error: " + bid + " is " + b["state"] + ".", True)
            i = self._leg_of(b["flight"])
            if i < 0:
                return self._reply("Confirmation refused: " + bid + " is not on a route and date the traveller asked for.", True)
            leg = self.legs[i]
            if leg["confirmed"]:
                return self._reply("Confirmation refused: that trip leg is already confirmed (" + leg["confirmed"] + ").", True)
            if b["passenger"].lower() != self.passenger.lower():
                return self._reply("Confirmation refused: the passenger name does not match the traveller exactly; cancel and rebook.", True)
            if b["flight"] != leg["target"]:
                f = self.flights[b["flight"]]
                if not self._fits([b["flight"], f["dep"], f["arr"], f["stops"], f["price"]], leg["rule"]):
                    why = "the flight breaks the traveller's time or stop rule"
                else:
                    why = "a cheaper flight also meets the traveller's rules"
                return self._reply("Confirmation refused: " + why + ". Cancel " + bid + " and book a better flight.", True)
            if b["bags"] != self.bags:
                return self._reply("Confirmation refused: the booking has " + str(b["bags"]) + " checked bags, the traveller asked for "
                                   + str(self.bags) + ".", True)
            b["state"] = "confirmed"
            leg["confirmed"] = bid
            code = "".join("ABCDEFGHJKLMNPQRSTUVWXYZ"[(self.next_booking * (k + 3) + len(bid) * k) % 24] for k in range(6))
            total = self.flights[b["flight"]]["price"] + BAG_FEE * b["bags"]
            msg = "Confirmed " + bid + ": " + b["flight"] + " for " + b["passenger"] + ", total $" + str(total) + ", record locator " + code + "."
            if all(x["confirmed"] for x in self.legs):
                self.finished = True
                return (msg + " Every requested flight is confirmed. Task complete.", 1.0, True, False, self._info(False))
            return self._reply(msg + " Other legs still need booking.", False)
        return self._reply("Error: unknown tool; use search_flights, book_flight, add_baggage, cancel_booking or confirm.", True)

    def hint(self):
        leg = self.legs[0]
        text = ("Results are listed by departure time, not by price: filter by the rule first, then take the lowest fare. "
                "Use the exact traveller name, set bags before confirming.")
        f = self.flights[leg["target"]]
        text += (" The first leg's right flight leaves between " + fmt(f["dep"] // 60 * 60) + " and "
                 + fmt(f["dep"] // 60 * 60 + 59) + ".")
        return text

    def _call(self, name, args):
        return json.dumps({"name": name, "arguments": args})

    def oracle(self):
        for leg in self.legs:
            if leg["confirmed"]:
                continue
            key = leg["origin"] + "-" + leg["dest"] + "-" + leg["date"]
            if key not in self.searched:
                return self._call("search_flights", {"origin": leg["origin"], "destination": leg["dest"], "date": leg["date"]})
            good = ""
            for bid in sorted(self.bookings):
                b = self.bookings[bid]
                if b["state"] == "held" and b["flight"] == leg["target"] and b["passenger"].lower() == self.passenger.lower():
                    good = bid
                    break
            if not good:
                return self._call("book_flight", {"flight_id": leg["target"], "passenger": self.passenger})
            if self.bookings[good]["bags"] != self.bags:
                return self._call("add_baggage", {"booking_id": good, "bags": self.bags})
            return self._call("confirm", {"booking_id": good})
        return self._call("confirm", {"booking_id": "BK-0"})
