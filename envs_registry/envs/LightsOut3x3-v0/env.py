import random
import re

COLS = "ABC"
CELL = re.compile(r"^\s*([A-Ca-c])\s*([1-3])\s*\.?\s*$")


def press_mask(r, c):
    mask = 1 << (r * 3 + c)
    for dr, dc in [[-1, 0], [1, 0], [0, -1], [0, 1]]:
        rr = r + dr
        cc = c + dc
        if 0 <= rr < 3 and 0 <= cc < 3:
            mask = mask | (1 << (rr * 3 + cc))
    return mask


PRESS = [press_mask(i // 3, i % 3) for i in range(9)]


def cell_name(i):
    return COLS[i % 3] + str(i // 3 + 1)


def solve(board):
    best = None
    for subset in range(512):
        effect = 0
        count = 0
        for i in range(9):
            if subset & (1 << i):
                effect = effect ^ PRESS[i]
                count += 1
        if effect == board:
            if best is None or count < best[0]:
                best = [count, subset]
    cells = []
    for i in range(9):
        if best[1] & (1 << i):
            cells.append(i)
    return cells


class Env:
    """Play Lights Out on a 3x3 grid: pressing a cell (named like "B2", columns A-C and rows 1-3) toggles it and its orthogonal neighbours, and the goal is to switch every light off within twelve presses; the board is scrambled from all-off by two to five seeded random presses (more presses on harder seeds), unreadable actions are explained and still cost a turn, and turning all lights off pays 1.0."""

    name = "LightsOut3x3"
    setting = "game"
    max_turns = 12

    def __init__(self):
        self.board = 0
        self.turn = 0
        self.done = False
        self.difficulty = 0
        self.scramble = 0

    def render(self):
        lines = ["   A B C"]
        for r in range(3):
            row = []
            for c in range(3):
                row.append("#" if self.board & (1 << (r * 3 + c)) else ".")
            lines.append(str(r + 1) + "  " + " ".join(row))
        return "\n".join(lines)

    def lit(self):
        return bin(self.board).count("1")

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        self.scramble = 2 + self.difficulty
        board = 0
        for attempt in range(1000):
            board = 0
            for k in range(self.scramble):
                board = board ^ PRESS[rng.randrange(9)]
            if board != 0:
                break
        self.board = board
        self.turn = 0
        self.done = False
        obs = ("Lights Out on a 3x3 grid ('#' = on, '.' = off). Pressing a cell toggles it and its "
               "up/down/left/right neighbours. Turn every light off. Answer with one cell per turn, "
               "like B2 (columns A-C, rows 1-3). You have " + str(self.max_turns) + " moves.\n"
               + self.render() + "\nMoves used: 0/" + str(self.max_turns))
        info = {"difficulty": self.difficulty, "scramble_presses": self.scramble, "lights_on": self.lit()}
        return obs, info

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"moves": self.turn, "solved": False}
        self.turn += 1
        text = str(action)
        match = CELL.match(text)
        reward = 0.0
        terminated = False
        if match is None:
            head = ("Could not read a cell from your action; answer with a column letter A-C and a row "
                    "number 1-3, like B2. This still uses a move.")
        else:
            c = COLS.index(match.group(1).upper())
            r = int(match.group(2)) - 1
            self.board = self.board ^ PRESS[r * 3 + c]
            head = "You pressed " + cell_name(r * 3 + c) + "."
            if self.board == 0:
                terminated = True
                reward = 1.0
                head = head + " All lights are off - solved!"
        obs = head + "\n" + self.render() + "\nMoves used: " + str(self.turn) + "/" + str(self.max_turns)
        truncated = (not terminated) and self.turn >= self.max_turns
        if terminated or truncated:
            self.done = True
        if truncated:
            obs = obs + "\nNo moves left."
        info = {"moves": self.turn, "solved": terminated, "lights_on": self.lit(), "difficulty": self.difficulty}
        return obs, reward, terminated, truncated, info

    def hint(self):
        cells = solve(self.board)
        if len(cells) == 0:
            return "All lights are already off."
        row = cells[len(cells) - 1] // 3 + 1
        return ("From the current board the shortest solution needs " + str(len(cells))
                + " press(es), and one of them is somewhere in row " + str(row) + ".")

    def oracle(self):
        cells = solve(self.board)
        if len(cells) == 0:
            return "A1"
        return cell_name(cells[0])
