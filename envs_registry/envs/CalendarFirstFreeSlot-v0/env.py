import json
import random

TITLES = ["Standup", "Design review", "1:1 with Dana", "Budget sync", "Client call", "Lunch talk", "Hiring panel",
          "Sprint planning", "Vendor demo", "Team retro", "Ops check-in", "Roadmap session", "Security briefing",
          "Interview", "Board prep", "Training", "Customer visit", "Coffee chat"]
MEETINGS = ["Launch kickoff", "Quarterly review", "Partner sync", "Offsite planning", "Contract walkthrough",
            "Data migration huddle", "Pricing workshop", "Incident postmortem", "Onboarding session", "Press rehearsal"]
DAY_START = 9 * 60
DAY_END = 17 * 60


def fmt(minutes):
    h = minutes // 60
    m = minutes % 60
    return ("0" if h < 10 else "") + str(h) + ":" + ("0" if m < 10 else "") + str(m)


def parse_time(value):
    """Minutes after midnight for 'HH:MM' (or an int hour); None when unusable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * 60 if 0 <= value <= 23 else None
    if not isinstance(value, str):
        return None
    s = value.strip()
    if ":" not in s:
        if s.isdigit() and len(s) <= 2 and int(s) <= 23:
            return int(s) * 60
        return None
    parts = s.split(":")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1][:2].isdigit() or len(parts[0]) > 2:
        return None
    h = int(parts[0])
    m = int(parts[1][:2])
    if h > 23 or m > 59:
        return None
    return h * 60 + m


class Env:
    """Schedule a meeting in the earliest free slot of a hidden calendar through a stateful calendar API: list_events(date), create_event(date, start, end, title), cancel_event(event_id) and submit(date, start), sent as JSON tool calls like {"name": "list_events", "arguments": {"date": "2025-03-10"}}; with the seeded difficulty the agent must look up one or several days, sometimes first cancel a called-off event found by its title, respect a time window, compute the first gap long enough for the meeting, create it without conflicts (conflicting or out-of-hours events are refused with an explanation) and report its date and start time, which pays 1.0 once when the calendar and the report are right."""

    name = "CalendarFirstFreeSlot"
    setting = "tool_use"
    max_turns = 16
    tools = [
        {"type": "function", "function": {
            "name": "list_events",
            "description": "List the events of one day (id, start-end, title), sorted by start time.",
            "parameters": {"type": "object",
                           "properties": {"date": {"type": "string", "description": "Day as YYYY-MM-DD."}},
                           "required": ["date"]}}},
        {"type": "function", "function": {
            "name": "create_event",
            "description": "Create an event; refused if it overlaps another event or lies outside 09:00-17:00.",
            "parameters": {"type": "object",
                           "properties": {"date": {"type": "string"},
                                          "start": {"type": "string", "description": "HH:MM"},
                                          "end": {"type": "string", "description": "HH:MM"},
                                          "title": {"type": "string"}},
                           "required": ["date", "start", "end", "title"]}}},
        {"type": "function", "function": {
            "name": "cancel_event",
            "description": "Cancel (delete) an event by its id.",
            "parameters": {"type": "object",
                           "properties": {"event_id": {"type": "string"}},
                           "required": ["event_id"]}}},
        {"type": "function", "function": {
            "name": "submit",
            "description": "Report the date and start time of the meeting you scheduled; ends the episode when everything is right.",
            "parameters": {"type": "object",
                           "properties": {"date": {"type": "string"}, "start": {"type": "string", "description": "HH:MM"}},
                           "required": ["date", "start"]}}},
    ]

    def __init__(self):
        self.level = 0
        self.turn = 0
        self.finished = False
        self.dates = []
        self.candidates = []
        self.events = {}
        self.original = []
        self.created = []
        self.listed = []
        self.cancel_id = ""
        self.cancel_title = ""
        self.cancel_date = ""
        self.title = ""
        self.duration = 60
        self.lo = DAY_START
        self.hi = DAY_END
        self.target_date = ""
        self.target_start = 0
        self.next_id = 100

    def reset(self, seed):
        rng = random.Random(seed)
        self.level = rng.randint(0, 3)
        self.turn = 0
        self.finished = False
        self.created = []
        self.listed = []
        month = rng.randint(1, 12)
        day = rng.randint(1, 24)
        self.dates = []
        for k in range(4):
            self.dates.append("2025-" + ("0" if month < 10 else "") + str(month) + "-"
                              + ("0" if day + k < 10 else "") + str(day + k))
        n_cand = [1, 2, 1, 3][self.level]
        self.candidates = self.dates[:n_cand]
        self.duration = [rng.choice([30, 60]), rng.choice([60, 90]), rng.choice([60, 90]), rng.choice([90, 120])][self.level]
        self.lo = DAY_START
        self.hi = DAY_END
        if self.level == 3:
            self.lo = rng.choice([570, 600, 630])
            self.hi = rng.choice([960, 990])
        self.title = rng.choice(MEETINGS)
        self.cancel_id = ""
        self.cancel_title = ""
        self.cancel_date = ""
        for _ in range(200):
            if self._generate(rng):
                break
        self.original = sorted(self.events)
        ids = sorted(self.events)
        self.next_id = 100 + rng.randint(0, 50)
        while ("ev" + str(self.next_id)) in self.events:
            self.next_id += 1
        lines = []
        if self.cancel_id:
            lines.append("The '" + self.cancel_title + "' event on " + self.cancel_date
                         + " has been called off: cancel it first (that frees its time).")
        if len(self.candidates) == 1:
            where = "on " + self.candidates[0]
        else:
            where = ("on the first of these days that has room: " + ", ".join(self.candidates))
        window = "between " + fmt(self.lo) + " and " + fmt(self.hi)
        lines.append("Schedule a " + str(self.duration) + "-minute meeting titled '" + self.title + "' " + where
                     + ", in the earliest free slot " + window + " (it must not overlap any event), then report its date and start time with submit(date, start).")
        obs = ("You manage a work calendar (working hours 09:00-17:00; event details are hidden until you call list_events).\n"
               + "Task: " + " ".join(lines) + "\n"
               + "Tools: list_events(date), create_event(date, start, end, title), cancel_event(event_id), submit(date, start). "
               + "Times are HH:MM. Reply with one JSON tool call, e.g. {\"name\": \"list_events\", \"arguments\": {\"date\": \""
               + self.candidates[0] + "\"}}. You have " + str(self.max_turns) + " calls.")
        info = {"difficulty": self.level, "days": list(self.candidates), "duration": self.duration,
                "events": len(ids)}
        return obs, info

    def _fill_day(self, rng, date, dense, used_titles):
        t = DAY_START + 30 * rng.randint(0, 2)
        while t < DAY_END - 30:
            length = 30 * rng.randint(1, 3)
            if t + length > DAY_END:
                length = DAY_END - t
            eid = "ev" + str(rng.randint(10, 99))
            while eid in self.events:
                eid = "ev" + str(rng.randint(10, 99))
            title = rng.choice(TITLES)
            self.events[eid] = [date, t, t + length, title]
            t += length
            if dense:
                gap = 30 * rng.randint(0, max(0, self.duration // 30 - 1))
            else:
                gap = 30 * rng.choice([0, 0, 1, 1, 2, 3, 4])
            t += gap

    def _generate(self, rng):
        self.events = {}
        dense_first = self.level in (1, 3) and rng.random() < 0.6
        for i, date in enumerate(self.dates):
            self._fill_day(rng, date, dense_first and i == 0, [])
        if self.level >= 2:
            cand_ids = [e for e in sorted(self.events) if self.events[e][0] in self.candidates]
            # prefer events whose removal matters: pick among the earlier ones on candidate days
            self.cancel_id = rng.choice(cand_ids)
            ev = self.events[self.cancel_id]
            same = [e for e in cand_ids if self.events[e][3] == ev[3] and self.events[e][0] == ev[0]]
            if len(same) > 1:
                return False
            self.cancel_title = ev[3]
            self.cancel_date = ev[0]
        slot = self._earliest(True)
        if slot is None:
            return False
        self.target_date = slot[0]
        self.target_start = slot[1]
        if self.level >= 2:
            # the cancellation should change where the meeting goes on at least some seeds; require a valid task only
            pass
        return True

    def _earliest(self, skip_cancel):
        for date in self.candidates:
            busy = []
            for eid in sorted(self.events):
                ev = self.events[eid]
                if ev[0] != date or (skip_cancel and eid == self.cancel_id):
                    continue
                busy.append([ev[1], ev[2]])
            busy.sort()
            t = self.lo
            while t + self.duration <= self.hi:
                clash = None
                for b in busy:
                    if b[0] < t + self.duration and t < b[1]:
                        clash = b
                        break
                if clash is None:
                    return [date, t]
                t = max(t + 30, clash[1])
        return None

    def _info(self, error):
        return {"difficulty": self.level, "turn": self.turn, "error": error,
                "cancelled": bool(self.cancel_id) and self.cancel_id not in self.events,
                "meeting_created": self._meeting_ids() != []}

    def _reply(self, obs, error):
        truncated = self.turn >= self.max_turns
        if truncated:
            self.finished = True
            obs = obs + " Out of calls."
        return obs, 0.0, False, truncated, self._info(error)

    def _meeting_ids(self):
        out = []
        for eid in self.created:
            if eid in self.events and self.events[eid][3].strip().lower() == self.title.lower():
                out.append(eid)
        return out

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
        if name == "list_events":
            date = args.get("date")
            date = date.strip() if isinstance(date, str) else None
            if date not in self.dates:
                return self._reply("Error: unknown date; use YYYY-MM-DD, calendar covers " + self.dates[0] + " to " + self.dates[-1] + ".", True)
            if date not in self.listed:
                self.listed.append(date)
            rows = []
            for eid in sorted(self.events, key=lambda k: [self.events[k][1], k]):
                ev = self.events[eid]
                if ev[0] == date:
                    rows.append(eid + " " + fmt(ev[1]) + "-" + fmt(ev[2]) + " " + ev[3])
            if not rows:
                return self._reply("No events on " + date + ".", False)
            return self._reply("Events on " + date + ": " + "; ".join(rows) + ".", False)
        if name == "create_event":
            date = args.get("date")
            date = date.strip() if isinstance(date, str) else None
            start = parse_time(args.get("start"))
            end = parse_time(args.get("end"))
            title = args.get("title")
            if date not in self.dates:
                return self._reply("Error: unknown date; use YYYY-MM-DD within " + self.dates[0] + " to " + self.dates[-1] + ".", True)
            if start is None or end is None:
                return self._reply("Error: start and end must be times like 10:30.", True)
            if not isinstance(title, str) or not title.strip() or len(title) > 80:
                return self._reply("Error: title must be a non-empty string.", True)
            if end <= start:
                return self._reply("Error: end must be after start.", True)
            if start < DAY_START or end > DAY_END:
                return self._reply("Error: events must lie within working hours 09:00-17:00.", True)
            for eid in sorted(self.events):
                ev = self.events[eid]
                if ev[0] == date and ev[1] < end and start < ev[2]:
                    return self._reply("Error: conflicts with " + eid + " " + fmt(ev[1]) + "-" + fmt(ev[2]) + " " + ev[3] + "; not created.", True)
            eid = "ev" + str(self.next_id)
            self.next_id += 1
            self.events[eid] = [date, start, end, title.strip()]
            self.created.append(eid)
            return self._reply("Created " + eid + " on " + date + " " + fmt(start) + "-" + fmt(end) + " '" + title.strip() + "'.", False)
        if name == "cancel_event":
            eid = args.get("event_id")
            eid = eid.strip() if isinstance(eid, str) else (("ev" + str(eid)) if isinstance(eid, int) and not isinstance(eid, bool) else None)
            if eid not in self.events:
                return self._reply("Error: no event with that id; ids look like ev42 (see list_events).", True)
            ev = self.events.pop(eid)
            return self._reply("Cancelled " + eid + " (" + ev[0] + " " + fmt(ev[1]) + "-" + fmt(ev[2]) + " " + ev[3] + ").", False)
        if name == "submit":
            date = args.get("date")
            date = date.strip() if isinstance(date, str) else None
            start = parse_time(args.get("start"))
            if date is None or start is None:
                return self._reply("Error: submit needs date (YYYY-MM-DD) and start (HH:MM).", True)
            problems = []
            if self.cancel_id and self.cancel_id in self.events:
                problems.append("the called-off event is still on the calendar")
            for eid in self.original:
                if eid != self.cancel_id and eid not in self.events:
                    problems.append("an event you were not asked to cancel is gone")
                    break
            mids = self._meeting_ids()
            if not mids:
                problems.append("no event titled '" + self.title + "' exists")
            elif len(mids) > 1:
                problems.append("there is more than one '" + self.title + "' event")
            else:
                ev = self.events[mids[0]]
                if ev[2] - ev[1] != self.duration:
                    problems.append("the meeting does not last " + str(self.duration) + " minutes")
                elif ev[0] != self.target_date or ev[1] != self.target_start:
                    problems.append("the meeting is not in the earliest free slot")
                elif date != ev[0] or start != ev[1]:
                    problems.append("the reported date/start do not match the meeting")
            if problems:
                return self._reply("Check failed: " + "; ".join(problems) + ". Fix it and submit again.", False)
            self.finished = True
            return ("Correct: '" + self.title + "' is booked on " + date + " at " + fmt(start) + ". Task complete.",
                    1.0, True, False, self._info(False))
        return self._reply("Error: unknown tool; use list_events, create_event, cancel_event or submit.", True)

    def hint(self):
        text = ("Look at each candidate day with list_events before booking; a slot works only if the whole "
                + str(self.duration) + " minutes fit between events and inside " + fmt(self.lo) + "-" + fmt(self.hi) + ".")
        if self.cancel_id:
            text += " Cancel the called-off event before you search, since its time becomes free."
        if len(self.candidates) > 1:
            text += " The meeting belongs on " + self.target_date + "."
        else:
            text += " The earliest slot starts in the " + ("morning." if self.target_start < 720 else "afternoon.")
        return text

    def _call(self, name, args):
        return json.dumps({"name": name, "arguments": args})

    def oracle(self):
        if self.cancel_id and self.cancel_id in self.events:
            if self.cancel_date not in self.listed:
                return self._call("list_events", {"date": self.cancel_date})
            return self._call("cancel_event", {"event_id": self.cancel_id})
        for date in self.candidates:
            if date not in self.listed:
                return self._call("list_events", {"date": date})
            if date == self.target_date:
                break
        end = self.target_start + self.duration
        good = ""
        for eid in self.created:
            if eid not in self.events:
                continue
            ev = self.events[eid]
            is_good = (ev[3].strip().lower() == self.title.lower() and ev[0] == self.target_date
                       and ev[1] == self.target_start and ev[2] == end and not good)
            if is_good:
                good = eid
                continue
            if ev[3].strip().lower() == self.title.lower() or (ev[0] == self.target_date and ev[1] < end and self.target_start < ev[2]):
                return self._call("cancel_event", {"event_id": eid})
        if not good:
            return self._call("create_event", {"date": self.target_date, "start": fmt(self.target_start),
                                               "end": fmt(end), "title": self.title})
        return self._call("submit", {"date": self.target_date, "start": fmt(self.target_start)})
