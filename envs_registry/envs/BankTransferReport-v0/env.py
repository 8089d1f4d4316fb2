import json
import random

ACCOUNT_NAMES = ["checking", "savings", "travel", "emergency", "rent", "vacation", "groceries", "college"]


def as_whole_number(value):
    """A JSON number that is a whole number, as int; None otherwise (bools are rejected)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and -1e15 < value < 1e15 and value == int(value):
        return int(value)
    return None


class Env:
    """Carry out a seeded list of money transfers between bank accounts through a small stateful banking API and then report the final balance of one account; the agent calls get_balance(account), transfer(from_account, to_account, amount) and submit(balance) as JSON tool calls such as {"name": "transfer", "arguments": {"from_account": "checking", "to_account": "savings", "amount": 37}}, balances are hidden until looked up, transfers that would overdraw an account are refused, and submit ends the episode paying 1.0 only when every requested transfer has been made and the submitted balance is the account's true current balance."""

    name = "BankTransferReport"
    setting = "tool_use"
    max_turns = 8
    tools = [
        {"type": "function", "function": {
            "name": "get_balance",
            "description": "Return the current balance (whole dollars) of one account.",
            "parameters": {"type": "object",
                           "properties": {"account": {"type": "string", "description": "Account name, e.g. checking."}},
                           "required": ["account"]}}},
        {"type": "function", "function": {
            "name": "transfer",
            "description": "Move a whole-dollar amount from one account to another; refused if it would overdraw the source.",
            "parameters": {"type": "object",
                           "properties": {"from_account": {"type": "string"},
                                          "to_account": {"type": "string"},
                                          "amount": {"type": "integer", "minimum": 1}},
                           "required": ["from_account", "to_account", "amount"]}}},
        {"type": "function", "function": {
            "name": "submit",
            "description": "Report the requested account balance; ends the episode.",
            "parameters": {"type": "object",
                           "properties": {"balance": {"type": "integer"}},
                           "required": ["balance"]}}},
    ]

    def __init__(self):
        self.accounts = []
        self.balances = {}
        self.required = []
        self.done_transfers = 0
        self.target = "savings"
        self.start_target = 0
        self.turn = 0
        self.finished = False
        self.seen_target = False

    def reset(self, seed):
        rng = random.Random(seed)
        n_accounts = rng.randint(3, 4)
        self.accounts = rng.sample(ACCOUNT_NAMES, n_accounts)
        self.balances = {}
        for acc in self.accounts:
            self.balances[acc] = rng.randint(40, 900)
        n_transfers = rng.randint(1, 2)
        sim = dict(self.balances)
        self.required = []
        first_src, first_dst = rng.sample(self.accounts, 2)
        amount = rng.randint(5, max(6, sim[first_src] - 10))
        self.required.append([first_src, first_dst, amount])
        sim[first_src] -= amount
        sim[first_dst] += amount
        self.target = first_dst
        self.start_target = self.balances[first_dst]
        if n_transfers == 2:
            # the second transfer touches the target account, either draining it or topping it up
            others = [a for a in self.accounts if a != first_dst]
            other = rng.choice(others)
            if rng.random() < 0.5:
                src, dst = first_dst, other
            else:
                src, dst = other, first_dst
            amount2 = rng.randint(3, max(4, sim[src] - 5))
            self.required.append([src, dst, amount2])
            sim[src] -= amount2
            sim[dst] += amount2
        self.done_transfers = 0
        self.turn = 0
        self.finished = False
        self.seen_target = False
        steps = []
        for req in self.required:
            steps.append("move " + str(req[2]) + " from " + req[0] + " to " + req[1])
        task = ", then ".join(steps)
        if len(steps) > 1:
            task = task + ", in that order"
        obs = ("You manage these bank accounts: " + ", ".join(self.accounts) + " (balances are hidden until you call get_balance).\n"
               + "Task: " + task + ". Then report the final balance of " + self.target
               + " with submit(balance).\n"
               + "Tools: get_balance(account), transfer(from_account, to_account, amount), submit(balance). "
               + "Reply with one JSON tool call, e.g. {\"name\": \"get_balance\", \"arguments\": {\"account\": \""
               + self.accounts[0] + "\"}}. You have " + str(self.max_turns) + " calls.")
        # difficulty 0-2 from the seed: more accounts and more transfers
        difficulty = (len(self.accounts) - 3) + (len(self.required) - 1)
        info = {"difficulty": difficulty, "accounts": list(self.accounts), "transfers": len(self.required),
                "target": self.target}
        return obs, info

    def _info(self, error):
        return {"turn": self.turn, "transfers_done": self.done_transfers,
                "transfers_required": len(self.required), "error": error}

    def _end(self, obs, error):
        truncated = self.turn >= self.max_turns
        if truncated:
            self.finished = True
            obs = obs + " Out of calls."
        return obs, 0.0, False, truncated, self._info(error)

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
        if not isinstance(args, dict):
            return self._end("Error: arguments must be a JSON object.", True)
        if name == "get_balance":
            acc = args.get("account")
            acc = acc.strip().lower() if isinstance(acc, str) else None
            if acc not in self.balances:
                return self._end("Error: unknown account. Accounts: " + ", ".join(self.accounts) + ".", True)
            if acc == self.target:
                self.seen_target = True
            return self._end(acc + " balance: " + str(self.balances[acc]) + ".", False)
        if name == "transfer":
            src = args.get("from_account")
            dst = args.get("to_account")
            src = src.strip().lower() if isinstance(src, str) else None
            dst = dst.strip().lower() if isinstance(dst, str) else None
            amount = as_whole_number(args.get("amount"))
            if src not in self.balances or dst not in self.balances:
                return self._end("Error: unknown account. Accounts: " + ", ".join(self.accounts) + ".", True)
            if src == dst:
                return self._end("Error: from_account and to_account must differ.", True)
            if amount is None or amount <= 0:
                return self._end("Error: amount must be a positive whole number.", True)
            if amount > self.balances[src]:
                return self._end("Error: insufficient funds in " + src + "; transfer refused.", True)
            self.balances[src] -= amount
            self.balances[dst] += amount
            if src == self.target or dst == self.target:
                self.seen_target = False
            if self.done_transfers < len(self.required):
                req = self.required[self.done_transfers]
                if req[0] == src and req[1] == dst and req[2] == amount:
                    self.done_transfers += 1
            return self._end("Transferred " + str(amount) + " from " + src + " to " + dst + ".", False)
        if name == "submit":
            value = as_whole_number(args.get("balance"))
            if value is None:
                return self._end("Error: balance must be a whole number.", True)
            self.finished = True
            if self.done_transfers < len(self.required):
                return ("Submitted, but not every requested transfer was made in order. Task failed.",
                        0.0, True, False, self._info(False))
            if value != self.balances[self.target]:
                return ("Submitted " + str(value) + ", which is not the balance of " + self.target + ". Task failed.",
                        0.0, True, False, self._info(False))
            return ("Correct: " + self.target + " holds " + str(value) + ". Task complete.",
                    1.0, True, False, self._info(False))
        return self._end("Error: unknown tool; use get_balance, transfer or submit.", True)

    def hint(self):
        return ("Make the transfers exactly as listed, in order, before submitting. Before any transfer "
                + self.target + " held " + str(self.start_target) + "; every transfer touching it changes it by the amount moved.")

    def oracle(self):
        if self.done_transfers < len(self.required):
            req = self.required[self.done_transfers]
            return json.dumps({"name": "transfer",
                               "arguments": {"from_account": req[0], "to_account": req[1], "amount": req[2]}})
        if not self.seen_target:
            return json.dumps({"name": "get_balance", "arguments": {"account": self.target}})
        return json.dumps({"name": "submit", "arguments": {"balance": self.balances[self.target]}})
