import json
import random

TEAM = ["alice", "bilal", "chen", "dana", "emeka", "farah", "goran", "hana"]
TITLES = ["Login page times out", "CSV export drops last row", "Dark mode colors wrong", "Search ignores accents",
          "Password reset email delayed", "Upload fails over 10 MB", "Invoice totals off by a cent",
          "Mobile menu overlaps logo", "API returns 500 on empty body", "Timezone shown as UTC",
          "Slow dashboard on large accounts", "Broken link in footer", "Duplicate notifications",
          "Cannot delete draft", "Typo on pricing page", "Session lost after refresh", "Chart legend cut off",
          "Webhook retries never stop", "Sorting by date is reversed", "Avatar upload rotates photo"]
PHRASES = ["fixed in release", "verified on staging build", "patched in hotfix", "resolved by config change"]
STATUSES = ["open", "in_progress", "closed"]
# tickets, page size, comment required, workflow through in_progress, shuffled listing
LEVELS = [[5, 10, False, False, False], [7, 10, True, False, False], [10, 10, True, True, True],
          [14, 6, True, True, True]]


class Env:
    """Triage a small issue tracker through its API: find the highest-priority ticket that is open and assigned to nobody, assign it to the named teammate, leave the required comment and close it, without touching any other ticket; the agent calls list_tickets(status, page), assign(ticket_id, assignee), comment(ticket_id, text) and set_status(ticket_id, status) as JSON tool calls such as {"name": "assign", "arguments": {"ticket_id": "T-412", "assignee": "dana"}}, the tracker refuses to close unassigned tickets or comment on closed ones, harder seeds add more tickets, pagination, unsorted listings, priority ties broken by the smallest ticket number and an open -> in_progress -> closed workflow, and closing a ticket ends the episode paying 1.0 only when it was the right ticket with every requirement met."""

    name = "TicketTriageClose"
    setting = "tool_use"
    max_turns = 14
    tools = [
        {"type": "function", "function": {
            "name": "list_tickets",
            "description": "List tickets (id, priority P1 highest to P4 lowest, status, assignee, title), optionally filtered by status; results are paginated.",
            "parameters": {"type": "object",
                           "properties": {"status": {"type": "string", "enum": ["open", "in_progress", "closed", "any"]},
                                          "page": {"type": "integer", "minimum": 1}},
                           "required": []}}},
        {"type": "function", "function": {
            "name": "assign",
            "description": "Assign a ticket to a teammate.",
            "parameters": {"type": "object",
                           "properties": {"ticket_id": {"type": "string", "description": "Ticket id, e.g. T-412."},
                                          "assignee": {"type": "string"}},
                           "required": ["ticket_id", "assignee"]}}},
        {"type": "function", "function": {
            "name": "comment",
            "description": "Add a comment to a ticket that is not closed.",
            "parameters": {"type": "object",
                           "properties": {"ticket_id": {"type": "string"},
                                          "text": {"type": "string"}},
                           "required": ["ticket_id", "text"]}}},
        {"type": "function", "function": {
            "name": "set_status",
            "description": "Change a ticket's status to open, in_progress or closed; closing a ticket ends the session.",
            "parameters": {"type": "object",
                           "properties": {"ticket_id": {"type": "string"},
                                          "status": {"type": "string", "enum": ["open", "in_progress", "closed"]}},
                           "required": ["ticket_id", "status"]}}},
    ]

    def __init__(self):
        self.level = 0
        self.tickets = []
        self.listing = []
        self.page_size = 10
        self.need_comment = False
        self.workflow = False
        self.person = "alice"
        self.team = []
        self.phrase = ""
        self.target = ""
        self.touched = []
        self.turn = 0
        self.finished = False

    def reset(self, seed):
        rng = random.Random(seed)
        self.level = rng.randint(0, 3)
        n, self.page_size, self.need_comment, self.workflow, shuffled = LEVELS[self.level]
        numbers = sorted(rng.sample(range(100, 1000), n))
        titles = rng.sample(TITLES, n)
        team = rng.sample(TEAM, 5)
        self.person = team[0]
        self.team = sorted(team)
        self.phrase = rng.choice(PHRASES) + " " + str(rng.randint(2, 9)) + "." + str(rng.randint(0, 9)) + "." + str(rng.randint(0, 20))
        self.tickets = []
        for i in range(n):
            status = rng.choice(["open", "open", "in_progress", "closed"])
            assignee = rng.choice([None, None] + team) if status != "closed" else rng.choice(team)
            self.tickets.append({"id": "T-" + str(numbers[i]), "num": numbers[i], "priority": rng.randint(1, 4),
                                 "status": status, "assignee": assignee, "title": titles[i], "comments": []})
        # make sure at least one open unassigned ticket exists
        candidates = [t for t in self.tickets if t["status"] == "open" and t["assignee"] is None]
        if len(candidates) < 1 + (self.level >= 3):
            for t in rng.sample(self.tickets, 2):
                t["status"] = "open"
                t["assignee"] = None
            candidates = [t for t in self.tickets if t["status"] == "open" and t["assignee"] is None]
        best = min(t["priority"] for t in candidates)
        if self.level >= 1:
            # a decoy with better priority that is assigned or not open
            if best > 1:
                decoys = [t for t in self.tickets if not (t["status"] == "open" and t["assignee"] is None)]
                if decoys:
                    rng.choice(decoys)["priority"] = rng.randint(1, best - 1)
        if self.level >= 3:
            # a priority tie among the candidates; the smallest number wins
            others = [t for t in candidates if t["priority"] != best]
            if others:
                rng.choice(others)["priority"] = best
        best = min(t["priority"] for t in candidates)
        if self.level < 2:
            # no tie-break rule is stated on easy seeds, so the winner must be unique
            tied = sorted([t for t in candidates if t["priority"] == best], key=lambda t: t["num"])
            if len(tied) > 1 and best == 4:
                tied[0]["priority"] = 3
            elif len(tied) > 1:
                for t in tied[1:]:
                    t["priority"] = best + 1
            best = min(t["priority"] for t in candidates)
        self.target = min([t for t in candidates if t["priority"] == best], key=lambda t: t["num"])["id"]
        self.listing = list(range(n))
        if shuffled:
            rng.shuffle(self.listing)
        self.touched = []
        self.turn = 0
        self.finished = False
        steps = ["assign it to " + self.person]
        if self.need_comment:
            steps.append("add a comment containing \"" + self.phrase + "\"")
        if self.workflow:
            steps.append("move it to in_progress (the tracker only closes in_progress tickets)")
        steps.append("set its status to closed")
        obs = ("You are triaging an issue tracker with " + str(n) + " tickets (priority P1 is highest, P4 lowest). "
               + "Team: " + ", ".join(self.team) + ".\n"
               + "Task: find the highest-priority ticket that is open and assigned to nobody"
               + (" (if several tie, the one with the smallest ticket number)" if self.level >= 2 else "")
               + "; " + ", then ".join(steps) + ". Do not change any other ticket. Closing a ticket ends the session.\n"
               + "Tools: list_tickets(status, page), assign(ticket_id, assignee), comment(ticket_id, text), "
               + "set_status(ticket_id, status). Reply with one JSON tool call, e.g. {\"name\": \"list_tickets\", "
               + "\"arguments\": {\"status\": \"any\", \"page\": 1}}. You have " + str(self.max_turns) + " calls.")
        info = {"difficulty": self.level, "tickets": n, "comment_required": self.need_comment,
                "workflow": self.workflow, "assignee": self.person}
        return obs, info

    def _info(self, error):
        return {"difficulty": self.level, "turn": self.turn, "error": error}

    def _end(self, obs, error):
        truncated = self.turn >= self.max_turns
        if truncated:
            self.finished = True
            obs = obs + " Out of calls."
        return obs, 0.0, False, truncated, self._info(error)

    def _find(self, args):
        tid = args.get("ticket_id")
        if isinstance(tid, int) and not isinstance(tid, bool):
            tid = "T-" + str(tid)
        if not isinstance(tid, str):
            return None
        tid = tid.strip().upper()
        if not tid.startswith("T-"):
            tid = "T-" + tid
        for t in self.tickets:
            if t["id"] == tid:
                return t
        return None

    def _touch(self, ticket):
        if ticket["id"] != self.target and ticket["id"] not in self.touched:
            self.touched.append(ticket["id"])

    def _row(self, t):
        return (t["id"] + " | P" + str(t["priority"]) + " | " + t["status"] + " | "
                + (t["assignee"] if t["assignee"] else "unassigned") + " | " + t["title"])

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
        if name == "list_tickets":
            status = args.get("status", "any")
            status = status.strip().lower() if isinstance(status, str) else status
            if status is None or status == "":
                status = "any"
            if status not in STATUSES and status != "any":
                return self._end("Error: status must be open, in_progress, closed or any.", True)
            page = args.get("page", 1)
            if page is None:
                page = 1
            if isinstance(page, bool) or not isinstance(page, int) or page < 1:
                return self._end("Error: page must be a whole number from 1.", True)
            rows = [self.tickets[i] for i in self.listing if status == "any" or self.tickets[i]["status"] == status]
            pages = max(1, (len(rows) + self.page_size - 1) // self.page_size)
            if page > pages:
                return self._end("Error: only " + str(pages) + " page(s) for that filter.", True)
            chunk = rows[(page - 1) * self.page_size: page * self.page_size]
            head = ("Tickets (" + status + "), page " + str(page) + " of " + str(pages) + ", "
                    + str(len(rows)) + " in total:")
            body = "\n".join(self._row(t) for t in chunk) if chunk else "(none)"
            return self._end(head + "\n" + body, False)
        if name == "assign":
            t = self._find(args)
            if t is None:
                return self._end("Error: unknown ticket id.", True)
            who = args.get("assignee")
            who = who.strip().lower() if isinstance(who, str) else None
            if who not in self.team:
                return self._end("Error: unknown teammate; see the team list in the task.", True)
            if t["status"] == "closed":
                return self._end("Error: " + t["id"] + " is closed and cannot be reassigned.", True)
            if t["assignee"] != who:
                self._touch(t)
            t["assignee"] = who
            return self._end(t["id"] + " assigned to " + who + ".", False)
        if name == "comment":
            t = self._find(args)
            if t is None:
                return self._end("Error: unknown ticket id.", True)
            text = args.get("text")
            if not isinstance(text, str) or not text.strip():
                return self._end("Error: text must be a non-empty string.", True)
            if t["status"] == "closed":
                return self._end("Error: " + t["id"] + " is closed; comments are locked.", True)
            t["comments"].append(text.strip()[:300])
            return self._end("Comment added to " + t["id"] + ".", False)
        if name == "set_status":
            t = self._find(args)
            if t is None:
                return self._end("Error: unknown ticket id.", True)
            status = args.get("status")
            status = status.strip().lower().replace(" ", "_").replace("-", "_") if isinstance(status, str) else None
            if status not in STATUSES:
                return self._end("Error: status must be open, in_progress or closed.", True)
            if t["status"] == "closed":
                return self._end("Error: " + t["id"] + " is already closed.", True)
            if status == t["status"]:
                return self._end(t["id"] + " is already " + status + ".", False)
            if status == "closed":
                if t["assignee"] is None:
                    return self._end("Error: assign " + t["id"] + " before closing it.", True)
                if self.workflow and t["status"] != "in_progress":
                    return self._end("Error: only in_progress tickets can be closed; move " + t["id"]
                                     + " to in_progress first.", True)
                t["status"] = "closed"
                return self._close(t)
            self._touch(t)
            t["status"] = status
            return self._end(t["id"] + " is now " + status + ".", False)
        return self._end("Error: unknown tool; use list_tickets, assign, comment or set_status.", True)

    def _has_phrase(self, t):
        want = " ".join(self.phrase.lower().split())
        return any(want in " ".join(c.lower().split()) for c in t["comments"])

    def _close(self, t):
        self.finished = True
        if t["id"] != self.target:
            return (t["id"] + " closed, but it was not the highest-priority open unassigned ticket. Task failed.",
                    0.0, True, False, self._info(False))
        if t["assignee"] != self.person:
            return (t["id"] + " closed, but it is assigned to " + t["assignee"] + ", not " + self.person
                    + ". Task failed.", 0.0, True, False, self._info(False))
        if self.need_comment and not self._has_phrase(t):
            return (t["id"] + " closed without the required comment. Task failed.", 0.0, True, False, self._info(False))
        if self.touched:
            return (t["id"] + " closed, but other tickets were changed too (" + ", ".join(self.touched)
                    + "). Task failed.", 0.0, True, False, self._info(False))
        return (t["id"] + " closed by " + self.person + ". Task complete.", 1.0, True, False, self._info(False))

    def hint(self):
        best = 5
        for t in self.tickets:
            if t["id"] == self.target:
                best = t["priority"]
        ties = [t for t in self.tickets if t["status"] == "open" and t["assignee"] is None and t["priority"] == best]
        text = ("Use list_tickets with status open to skip in_progress and closed tickets. The ticket you want is P"
                + str(best) + "; " + str(len(ties)) + " open unassigned ticket(s) have that priority.")
        order = ["assign"]
        if self.need_comment:
            order.append("comment")
        if self.workflow:
            order.append("set_status in_progress")
        order.append("set_status closed")
        return text + " Call order: " + " -> ".join(order) + "."

    def oracle(self):
        t = None
        for tk in self.tickets:
            if tk["id"] == self.target:
                t = tk
        if t["assignee"] != self.person:
            return json.dumps({"name": "assign", "arguments": {"ticket_id": t["id"], "assignee": self.person}})
        if self.need_comment and not self._has_phrase(t):
            return json.dumps({"name": "comment", "arguments": {"ticket_id": t["id"], "text": self.phrase}})
        if self.workflow and t["status"] != "in_progress":
            return json.dumps({"name": "set_status", "arguments": {"ticket_id": t["id"], "status": "in_progress"}})
        return json.dumps({"name": "set_status", "arguments": {"ticket_id": t["id"], "status": "closed"}})
