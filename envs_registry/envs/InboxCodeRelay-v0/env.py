import json
import random
import re

PEOPLE = ["Priya Shah", "Marcus Webb", "Elena Rossi", "Tom Becker", "Aiko Mori", "Sam Ortiz", "Nadia Karim",
          "Leo Fischer", "Grace Kim", "Omar Haddad", "Julia Novak", "Ben Carter"]
SERVICES = ["CloudVault", "PayLink", "ShipFast", "DocuStore", "TeamChat", "MedPortal"]
FILLER = [
    ["Lunch on Friday?", "Are you free for lunch on Friday around 12:30? The new place on 4th street has good reviews."],
    ["Slides for the review", "I uploaded the slides for the quarterly review. Page 14 still needs numbers from finance."],
    ["Invoice 20417", "Attached is invoice 20417 for the March work, due in 30 days. Let me know if anything is unclear."],
    ["Parking change", "From Monday the garage entrance moves to level 2. Badge readers will be updated by 08:00."],
    ["Book club", "We are reading chapter 7 next week, 45 pages. Snacks are on me this time."],
    ["Server maintenance", "Maintenance window tonight 22:00-23:30. Expect up to 15 minutes of downtime."],
    ["Conference travel", "Flights for the conference are booked: departure 07:40, seat 23C, hotel for 3 nights."],
    ["Team photo", "The team photo is on Thursday at 15:00 in room 3B. Wear something blue if you can."],
    ["Budget draft", "Draft budget is 4 percent over target; can we cut 12000 from travel before Tuesday?"],
    ["Welcome aboard", "Welcome to the team! Your desk is 5-112 and onboarding starts at 09:30."],
]
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
PAGE = 5


def code_tokens(text):
    return re.findall(r"(?<![0-9])[0-9]{6}(?![0-9])", text)


class Env:
    """Handle an email-style inbox through a stateful messaging API to complete a seeded chore: list_messages(page) shows senders and subjects only, read_message(message_id) reveals a body, reply(message_id, body) sends a reply, archive(message_id) files a message away and finish() checks the result; every call is a JSON tool call such as {"name": "read_message", "arguments": {"message_id": "m412"}}; harder seeds add a second message from the same sender, forwarding a code to a different person, a paginated inbox and an expired code superseded by a newer one, so the agent must locate the right messages, extract the right 6-digit code, reply to the right message with only that code, archive what was asked and finish, which pays 1.0 once when everything holds (replying to the wrong person ends the episode unpaid)."""

    name = "InboxCodeRelay"
    setting = "tool_use"
    max_turns = 20
    tools = [
        {"type": "function", "function": {
            "name": "list_messages",
            "description": "List inbox messages, newest first, " + str(PAGE) + " per page: id, sender, subject, time (no bodies).",
            "parameters": {"type": "object",
                           "properties": {"page": {"type": "integer", "minimum": 1, "description": "Page number, default 1."}},
                           "required": []}}},
        {"type": "function", "function": {
            "name": "read_message",
            "description": "Show the full body of one message.",
            "parameters": {"type": "object",
                           "properties": {"message_id": {"type": "string"}},
                           "required": ["message_id"]}}},
        {"type": "function", "function": {
            "name": "reply",
            "description": "Send a reply to the sender of a message.",
            "parameters": {"type": "object",
                           "properties": {"message_id": {"type": "string"}, "body": {"type": "string"}},
                           "required": ["message_id", "body"]}}},
        {"type": "function", "function": {
            "name": "archive",
            "description": "Move a message out of the inbox into the archive.",
            "parameters": {"type": "object",
                           "properties": {"message_id": {"type": "string"}},
                           "required": ["message_id"]}}},
        {"type": "function", "function": {
            "name": "finish",
            "description": "Say you are done; the chore is checked and the episode ends if it is complete.",
            "parameters": {"type": "object", "properties": {}, "required": []}}},
    ]

    def __init__(self):
        self.level = 0
        self.turn = 0
        self.finished = False
        self.messages = {}
        self.order = []
        self.archived = []
        self.replies = []
        self.read = []
        self.pages_seen = []
        self.code = ""
        self.code_msgs = []
        self.target = ""
        self.to_archive = []
        self.month = "Jan"

    def reset(self, seed):
        rng = random.Random(seed)
        self.level = rng.randint(0, 3)
        self.turn = 0
        self.finished = False
        self.messages = {}
        self.archived = []
        self.replies = []
        self.read = []
        self.pages_seen = []
        self.month = rng.choice(MONTHS)
        n_msgs = [4, 5, 5, rng.randint(8, 9)][self.level]
        people = rng.sample(PEOPLE, 6)
        x = people[0]
        y = people[1]
        service = rng.choice(SERVICES)
        used_codes = []

        def new_code():
            c = str(rng.randint(100000, 999999))
            while c in used_codes:
                c = str(rng.randint(100000, 999999))
            used_codes.append(c)
            return c

        ids = []
        while len(ids) < n_msgs:
            mid = "m" + str(rng.randint(100, 999))
            if mid not in ids:
                ids.append(mid)
        times = sorted(rng.sample(range(0, 14 * 24 * 60), n_msgs))
        specs = []
        self.code = new_code()
        subj_code = service + " access code"
        specs.append([x, subj_code, "Hi, here is the " + service + " access code you asked for: " + self.code
                      + ". It is valid for 48 hours. Room 212 has the printer if you need it.", "code"])
        if self.level == 1:
            other = new_code()
            specs.append([x, "Re: parcel", "The parcel tracking number is " + other + ", not a code; it should arrive on day "
                          + str(rng.randint(2, 28)) + ".", "x_other"])
        if self.level >= 2:
            specs.append([y, "Need the " + service + " code", "Hi! " + x + " sent you the " + service
                          + " access code, right? Could you reply to me with it? Thanks.", "ask"])
        if self.level == 3:
            old = new_code()
            # the first code message becomes the newer one; add an older, expired code from x
            specs[0] = [x, "Updated " + service + " code", "Sorry, the earlier code expired. The new " + service
                        + " access code is " + self.code + ". Please discard " + old + ".", "code"]
            specs.append([x, subj_code, "Here is the " + service + " access code: " + old + ". Valid until tomorrow.", "old"])
        fillers = rng.sample(FILLER, n_msgs - len(specs))
        for i, f in enumerate(fillers):
            sender = people[2 + (i % 4)]
            body = f[1]
            if i == 0 and self.level >= 1:
                body = body + " Also, my " + rng.choice(SERVICES) + " one-time code " + new_code() + " came to you by mistake; ignore it."
            specs.append([sender, f[0], body, "filler"])
        # assign times: the 'old' code message must be older than the new 'code' message
        rng.shuffle(specs)
        # keep the story in time order: expired code, then current code, then the request for it
        chain = [s for k in ["old", "code", "ask"] for s in specs if s[3] == k]
        slots = sorted(i for i in range(len(specs)) if specs[i][3] in ("old", "code", "ask"))
        for slot, spec in zip(slots, chain):
            specs[slot] = spec
        self.code_msgs = []
        self.to_archive = []
        self.target = ""
        for i, s in enumerate(specs):
            mid = ids[i]
            t = times[i]
            self.messages[mid] = {"from": s[0], "subject": s[1], "body": s[2], "time": t, "kind": s[3]}
            if s[3] == "code":
                self.code_msgs.append(mid)
                code_id = mid
            if s[3] == "old":
                old_id = mid
            if s[3] == "ask":
                ask_id = mid
            if s[3] == "x_other":
                other_id = mid
        self.order = sorted(self.messages, key=lambda k: -self.messages[k]["time"])
        if self.level == 0:
            self.target = code_id
            task = ("Reply to the message from " + x + " with the access code it contains (just reply with the code), then call finish().")
        elif self.level == 1:
            self.target = code_id
            self.to_archive = [code_id]
            task = ("Reply to " + x + "'s message about the " + service + " access code with the code it contains, then archive that "
                    + "message and call finish(). (" + x + " sent you more than one message.)")
        elif self.level == 2:
            self.target = ask_id
            self.to_archive = sorted([code_id, ask_id])
            task = (y + " is asking for the " + service + " access code that " + x + " sent you. Reply to " + y
                    + "'s message with that code, then archive both " + x + "'s code message and " + y + "'s request, and call finish().")
        else:
            self.target = ask_id
            self.to_archive = sorted([code_id, old_id])
            self.code_msgs = [old_id, code_id]
            task = (y + " is asking for the " + service + " access code. " + x + " has sent you codes; reply to " + y
                    + "'s message with the one that is currently valid (only that code), then archive every message from "
                    + x + " about the code, and call finish(). The inbox has more than one page.")
        obs = ("You handle an inbox of " + str(n_msgs) + " messages (bodies are hidden until you read them).\n"
               + "Task: " + task + "\n"
               + "Tools: list_messages(page), read_message(message_id), reply(message_id, body), archive(message_id), finish(). "
               + "Reply with one JSON tool call, e.g. {\"name\": \"list_messages\", \"arguments\": {\"page\": 1}}. You have "
               + str(self.max_turns) + " calls.")
        info = {"difficulty": self.level, "messages": n_msgs, "to_archive": len(self.to_archive)}
        return obs, info

    def _info(self, error):
        return {"difficulty": self.level, "turn": self.turn, "error": error, "replies": len(self.replies),
                "archived": len(self.archived)}

    def _reply(self, obs, error):
        truncated = self.turn >= self.max_turns
        if truncated:
            self.finished = True
            obs = obs + " Out of calls."
        return obs, 0.0, False, truncated, self._info(error)

    def _stamp(self, t):
        day = t // 1440 + 1
        h = (t % 1440) // 60
        m = t % 60
        return (self.month + " " + ("0" if day < 10 else "") + str(day) + " "
                + ("0" if h < 10 else "") + str(h) + ":" + ("0" if m < 10 else "") + str(m))

    def _mid(self, value):
        if isinstance(value, int) and not isinstance(value, bool):
            value = "m" + str(value)
        if not isinstance(value, str):
            return None
        v = value.strip().lower()
        if v.isdigit():
            v = "m" + v
        return v if v in self.messages else None

    def _latest_target_reply(self):
        last = None
        for r in self.replies:
            if r[0] == self.target:
                last = r
        return last

    def _reply_ok(self, body):
        found = code_tokens(body)
        return len(found) > 0 and all(c == self.code for c in found)

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
        if args is None and name in ("finish", "list_messages"):
            args = {}
        if not isinstance(args, dict):
            return self._reply("Error: arguments must be a JSON object.", True)
        if name == "list_messages":
            page = args.get("page", 1)
            if isinstance(page, str) and page.strip().isdigit():
                page = int(page.strip())
            if isinstance(page, bool) or not isinstance(page, int) or page < 1:
                return self._reply("Error: page must be a positive whole number.", True)
            inbox = [m for m in self.order if m not in self.archived]
            pages = max(1, (len(inbox) + PAGE - 1) // PAGE)
            if page > pages:
                return self._reply("Error: the inbox has only " + str(pages) + " page(s).", True)
            if page not in self.pages_seen:
                self.pages_seen.append(page)
            rows = []
            for mid in inbox[(page - 1) * PAGE: page * PAGE]:
                msg = self.messages[mid]
                rows.append(mid + " | " + msg["from"] + " | " + msg["subject"] + " | " + self._stamp(msg["time"]))
            return self._reply("Inbox page " + str(page) + " of " + str(pages) + " (newest first):\n" + "\n".join(rows), False)
        if name == "read_message":
            mid = self._mid(args.get("message_id"))
            if mid is None:
                return self._reply("Error: no message with that id; ids look like m123 (see list_messages).", True)
            if mid not in self.read:
                self.read.append(mid)
            msg = self.messages[mid]
            return self._reply("From: " + msg["from"] + "\nSubject: " + msg["subject"] + "\nSent: " + self._stamp(msg["time"])
                               + "\n\n" + msg["body"], False)
        if name == "reply":
            mid = self._mid(args.get("message_id"))
            body = args.get("body")
            if mid is None:
                return self._reply("Error: no message with that id; ids look like m123 (see list_messages).", True)
            if not isinstance(body, str) or not body.strip():
                return self._reply("Error: body must be a non-empty string.", True)
            if len(body) > 600:
                return self._reply("Error: body is too long (600 characters at most).", True)
            self.replies.append([mid, body])
            return self._reply("Reply sent to " + self.messages[mid]["from"] + " (re: " + self.messages[mid]["subject"] + ").", False)
        if name == "archive":
            mid = self._mid(args.get("message_id"))
            if mid is None:
                return self._reply("Error: no message with that id; ids look like m123 (see list_messages).", True)
            if mid in self.archived:
                return self._reply("Error: " + mid + " is already archived.", True)
            self.archived.append(mid)
            return self._reply("Archived " + mid + ".", False)
        if name == "finish":
            for r in self.replies:
                if r[0] != self.target:
                    self.finished = True
                    return ("Task failed: you replied to " + self.messages[r[0]]["from"] + " ('" + self.messages[r[0]]["subject"]
                            + "'), which was not the message to answer.", 0.0, True, False, self._info(False))
            problems = []
            last = self._latest_target_reply()
            if last is None:
                problems.append("the requested reply has not been sent")
            elif not self._reply_ok(last[1]):
                problems.append("your latest reply does not contain exactly the right code")
            missing = [m for m in self.to_archive if m not in self.archived]
            if missing:
                problems.append(str(len(missing)) + " message(s) that should be archived are still in the inbox")
            if problems:
                return self._reply("Not done yet: " + "; ".join(problems) + ".", False)
            self.finished = True
            return ("Done: the right code went to the right person and the inbox is tidy. Task complete.",
                    1.0, True, False, self._info(False))
        return self._reply("Error: unknown tool; use list_messages, read_message, reply, archive or finish.", True)

    def hint(self):
        text = "Subjects do not show codes; read the message bodies. The code is the 6-digit number meant for you."
        if self.level >= 2:
            text += " The reply goes to the person asking, not to the sender of the code."
        if self.level == 3:
            text += " The newer of the two code messages supersedes the older one; list every page before deciding."
        else:
            text += " The code is in message " + self.code_msgs[-1] + "."
        return text

    def _call(self, name, args):
        return json.dumps({"name": name, "arguments": args})

    def oracle(self):
        n_pages = 2 if self.level == 3 else 1
        for p in range(1, n_pages + 1):
            if p not in self.pages_seen and not self.archived:
                return self._call("list_messages", {"page": p})
        for mid in self.code_msgs:
            if mid not in self.read:
                return self._call("read_message", {"message_id": mid})
        last = self._latest_target_reply()
        if last is None or not self._reply_ok(last[1]):
            return self._call("reply", {"message_id": self.target, "body": "Here is the code: " + self.code})
        for mid in self.to_archive:
            if mid not in self.archived:
                return self._call("archive", {"message_id": mid})
        return self._call("finish", {})
