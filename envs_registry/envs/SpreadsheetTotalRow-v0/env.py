import json
import random
import re

COLUMN_SETS = [
    ["Jan", "Feb", "Mar", "Apr"],
    ["Q1", "Q2", "Q3", "Q4"],
    ["North", "South", "East", "West"],
    ["Mon", "Tue", "Wed", "Thu"],
    ["Store1", "Store2", "Store3", "Store4"],
]
ROW_LABELS = ["apples", "bread", "cheese", "coffee", "eggs", "flour", "honey", "juice", "lemons",
              "milk", "nuts", "oats", "pasta", "rice", "salt", "tea", "yogurt", "butter"]
LETTERS = "ABCDEFGH"
LEVELS = [[2, 3, 0], [3, 4, 0], [3, 5, 1], [4, 6, 2]]  # data columns, data rows, corrections


def as_number(value):
    """A finite JSON number as int when whole, float otherwise; None for anything else (bools too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -10 ** 15 < value < 10 ** 15 else None
    if isinstance(value, float) and -1e15 < value < 1e15:
        if value == int(value):
            return int(value)
        return value
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"-?[0-9]+", text):
            return int(text)
        if re.fullmatch(r"-?[0-9]+\.[0-9]+", text):
            return as_number(float(text))
    return None


def show(value):
    if value is None:
        return "(empty)"
    if isinstance(value, float):
        return str(round(value, 4))
    return str(value)


class Env:
    """Fill in the Total row of a small spreadsheet through a cell API and report the grand total; the agent sees only the sheet layout (header labels in row 1, item labels in column A, values hidden) and calls get_cell(cell), set_cell(cell, value), sum_range(range) and submit(value) as JSON tool calls such as {"name": "sum_range", "arguments": {"range": "B2:B5"}}; on harder seeds the sheet is larger and some mistyped cells must be corrected before totaling, and submit ends the episode paying 1.0 only when every correction is in place, every data column's Total cell equals the sum of that column's data cells, and the submitted value is the sum of the Total row."""

    name = "SpreadsheetTotalRow"
    setting = "tool_use"
    max_turns = 20
    tools = [
        {"type": "function", "function": {
            "name": "get_cell",
            "description": "Return the value of one cell, addressed like B3 (column letter, row number).",
            "parameters": {"type": "object",
                           "properties": {"cell": {"type": "string", "description": "Cell address, e.g. B3."}},
                           "required": ["cell"]}}},
        {"type": "function", "function": {
            "name": "set_cell",
            "description": "Write a number into one cell; header row 1 and label column A are read-only.",
            "parameters": {"type": "object",
                           "properties": {"cell": {"type": "string"},
                                          "value": {"type": "number"}},
                           "required": ["cell", "value"]}}},
        {"type": "function", "function": {
            "name": "sum_range",
            "description": "Sum the numeric cells of a rectangular range such as B2:B6 or B2:D2; empty cells count as 0.",
            "parameters": {"type": "object",
                           "properties": {"range": {"type": "string", "description": "Range like B2:B6."}},
                           "required": ["range"]}}},
        {"type": "function", "function": {
            "name": "submit",
            "description": "Report the grand total (sum of the Total row); ends the episode.",
            "parameters": {"type": "object",
                           "properties": {"value": {"type": "number"}},
                           "required": ["value"]}}},
    ]

    def __init__(self):
        self.level = 0
        self.n_cols = 2
        self.n_rows = 3
        self.headers = []
        self.labels = []
        self.cells = {}
        self.corrections = []
        self.total_row = 5
        self.turn = 0
        self.finished = False

    def reset(self, seed):
        rng = random.Random(seed)
        self.level = rng.randint(0, 3)
        spec = LEVELS[self.level]
        self.n_cols = spec[0]
        self.n_rows = spec[1]
        self.headers = rng.choice(COLUMN_SETS)[:self.n_cols]
        self.labels = rng.sample(ROW_LABELS, self.n_rows)
        self.total_row = self.n_rows + 2
        self.cells = {}
        for c in range(self.n_cols):
            for r in range(self.n_rows):
                self.cells[LETTERS[c + 1] + str(r + 2)] = rng.randint(10, 999)
        self.corrections = []
        data_cells = sorted(self.cells.keys())
        for cell in rng.sample(data_cells, spec[2]):
            wrong = self.cells[cell]
            right = rng.randint(10, 999)
            while right == wrong:
                right = rng.randint(10, 999)
            self.corrections.append([cell, right])
        self.corrections.sort()
        self.turn = 0
        self.finished = False
        first = LETTERS[1]
        last = LETTERS[self.n_cols]
        layout = ("Row 1 headers: A1=Item, " + ", ".join(LETTERS[c + 1] + "1=" + self.headers[c] for c in range(self.n_cols))
                  + ". Column A labels: " + ", ".join("A" + str(r + 2) + "=" + self.labels[r] for r in range(self.n_rows))
                  + ", A" + str(self.total_row) + "=Total.")
        task = ("fill the Total row: each of " + first + str(self.total_row) + " to " + last + str(self.total_row)
                + " must hold the sum of the data cells above it (rows 2 to " + str(self.n_rows + 1) + ")")
        if self.corrections:
            fixes = " and ".join(cell + " should be " + str(value) for cell, value in self.corrections)
            task = ("first correct the mistyped data: " + fixes + "; then " + task)
        obs = ("You are editing a spreadsheet (columns A to " + last + "). " + layout
               + " The data values are hidden until you read them.\n"
               + "Task: " + task + ". Finally submit the grand total (the sum of the Total row) with submit(value).\n"
               + "Tools: get_cell(cell), set_cell(cell, value), sum_range(range), submit(value). "
               + "Reply with one JSON tool call, e.g. {\"name\": \"sum_range\", \"arguments\": {\"range\": \""
               + first + "2:" + first + str(self.n_rows + 1) + "\"}}. You have " + str(self.max_turns) + " calls.")
        info = {"difficulty": self.level, "columns": self.n_cols, "rows": self.n_rows,
                "corrections": len(self.corrections), "total_row": self.total_row}
        return obs, info

    def _info(self, error):
        return {"difficulty": self.level, "turn": self.turn, "error": error}

    def _end(self, obs, error):
        truncated = self.turn >= self.max_turns
        if truncated:
            self.finished = True
            obs = obs + " Out of calls."
        return obs, 0.0, False, truncated, self._info(error)

    def _parse_cell(self, text):
        if not isinstance(text, str):
            return None
        m = re.fullmatch(r"([A-Za-z])([0-9]{1,3})", text.strip())
        if m is None:
            return None
        col = LETTERS.find(m.group(1).upper())
        row = int(m.group(2))
        if col < 0 or col > self.n_cols or row < 1 or row > self.total_row:
            return None
        return [col, row]

    def _value(self, col, row):
        return self.cells.get(LETTERS[col] + str(row))

    def _column_sum(self, col):
        total = 0
        for row in range(2, self.n_rows + 2):
            v = self._value(col, row)
            if isinstance(v, (int, float)):
                total += v
        return total

    def _grand_total(self):
        return sum(self._column_sum(c + 1) for c in range(self.n_cols))

    def _bounds(self):
        return "Cells run from A1 to " + LETTERS[self.n_cols] + str(self.total_row) + "."

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
        if name == "get_cell":
            pos = self._parse_cell(args.get("cell"))
            if pos is None:
                return self._end("Error: bad cell address. " + self._bounds(), True)
            col, row = pos
            address = LETTERS[col] + str(row)
            if row == 1:
                text = "Item" if col == 0 else self.headers[col - 1]
            elif col == 0:
                text = "Total" if row == self.total_row else self.labels[row - 2]
            else:
                text = show(self._value(col, row))
            return self._end(address + " = " + text + ".", False)
        if name == "set_cell":
            pos = self._parse_cell(args.get("cell"))
            if pos is None:
                return self._end("Error: bad cell address. " + self._bounds(), True)
            col, row = pos
            if col == 0 or row == 1:
                return self._end("Error: row 1 and column A are read-only labels.", True)
            value = as_number(args.get("value"))
            if value is None:
                return self._end("Error: value must be a number.", True)
            address = LETTERS[col] + str(row)
            self.cells[address] = value
            return self._end(address + " set to " + show(value) + ".", False)
        if name == "sum_range":
            spec = args.get("range")
            parts = spec.split(":") if isinstance(spec, str) else []
            if len(parts) == 1:
                parts = [parts[0], parts[0]]
            if len(parts) != 2:
                return self._end("Error: range must look like B2:B6. " + self._bounds(), True)
            a = self._parse_cell(parts[0])
            b = self._parse_cell(parts[1])
            if a is None or b is None:
                return self._end("Error: bad range address. " + self._bounds(), True)
            total = 0
            for col in range(min(a[0], b[0]), max(a[0], b[0]) + 1):
                for row in range(min(a[1], b[1]), max(a[1], b[1]) + 1):
                    v = self._value(col, row) if col > 0 and row > 1 else None
                    if isinstance(v, (int, float)):
                        total += v
            label = LETTERS[a[0]] + str(a[1]) + ":" + LETTERS[b[0]] + str(b[1])
            return self._end("sum(" + label + ") = " + show(total) + ".", False)
        if name == "submit":
            value = as_number(args.get("value"))
            if value is None:
                return self._end("Error: value must be a number.", True)
            self.finished = True
            for cell, right in self.corrections:
                if self.cells.get(cell) != right:
                    return ("Submitted, but " + cell + " was not corrected to " + str(right) + ". Task failed.",
                            0.0, True, False, self._info(False))
            for c in range(self.n_cols):
                address = LETTERS[c + 1] + str(self.total_row)
                have = self.cells.get(address)
                if not isinstance(have, (int, float)) or abs(have - self._column_sum(c + 1)) > 1e-6:
                    return ("Submitted, but " + address + " does not hold the sum of its column. Task failed.",
                            0.0, True, False, self._info(False))
            grand = self._grand_total()
            if abs(value - grand) > 1e-6:
                return ("Submitted " + show(value) + ", which is not the sum of the Total row. Task failed.",
                        0.0, True, False, self._info(False))
            return ("Correct: the Total row is filled and the grand total is " + show(grand) + ". Task complete.",
                    1.0, True, False, self._info(False))
        return self._end("Error: unknown tool; use get_cell, set_cell, sum_range or submit.", True)

    def hint(self):
        first = LETTERS[1]
        text = ("Work column by column: sum_range over " + first + "2:" + first + str(self.n_rows + 1)
                + " (and likewise for the other columns) gives the value to write into row " + str(self.total_row)
                + " with set_cell; the grand total is sum_range over the whole Total row.")
        if self.corrections:
            text = "Make the corrections with set_cell before summing, or the totals will be stale. " + text
        return text

    def oracle(self):
        for cell, right in self.corrections:
            if self.cells.get(cell) != right:
                return json.dumps({"name": "set_cell", "arguments": {"cell": cell, "value": right}})
        for c in range(self.n_cols):
            address = LETTERS[c + 1] + str(self.total_row)
            want = self._column_sum(c + 1)
            have = self.cells.get(address)
            if not isinstance(have, (int, float)) or abs(have - want) > 1e-6:
                return json.dumps({"name": "set_cell", "arguments": {"cell": address, "value": want}})
        return json.dumps({"name": "submit", "arguments": {"value": self._grand_total()}})
