import heapq
import random
import re

GOAL = "123456780"
TILE_TEXT = re.compile(r"^\s*(?:tile\s*)?([0-9])\s*\.?\s*$", re.IGNORECASE)
SCRAMBLE = [6, 10, 16, 24]


def neighbours(pos):
    r, c = pos // 3, pos % 3
    out = []
    if r > 0:
        out.append(pos - 3)
    if r < 2:
        out.append(pos + 3)
    if c > 0:
        out.append(pos - 1)
    if c < 2:
        out.append(pos + 1)
    return out


def slide(state, tile):
    """State after sliding tile (a digit character) into the gap, or None if it is not next to the gap."""
    if len(tile) != 1 or tile == "0" or tile not in state:
        return None
    gap = state.index("0")
    pos = state.index(tile)
    if pos not in neighbours(gap):
        return None
    cells = list(state)
    cells[gap] = tile
    cells[pos] = "0"
    return "".join(cells)


def manhattan(state):
    total = 0
    for pos in range(9):
        t = state[pos]
        if t != "0":
            home = int(t) - 1
            total += abs(home // 3 - pos // 3) + abs(home % 3 - pos % 3)
    return total


def solve(state):
    """Optimal list of tiles to slide (A* with the Manhattan heuristic, deterministic tie-breaks)."""
    if state == GOAL:
        return []
    counter = 0
    heap = [[manhattan(state), 0, counter, state]]
    best_g = {state: 0}
    prev = {state: None}
    while heap:
        f, g, order, cur = heapq.heappop(heap)
        if cur == GOAL:
            break
        if g > best_g[cur]:
            continue
        gap = cur.index("0")
        for pos in neighbours(gap):
            tile = cur[pos]
            nxt = slide(cur, tile)
            ng = g + 1
            if nxt not in best_g or ng < best_g[nxt]:
                best_g[nxt] = ng
                prev[nxt] = [cur, tile]
                counter += 1
                heapq.heappush(heap, [ng + manhattan(nxt), ng, counter, nxt])
    tiles = []
    cur = GOAL
    while prev[cur] is not None:
        tiles.append(prev[cur][1])
        cur = prev[cur][0]
    tiles.reverse()
    return tiles


def render(state):
    rows = []
    for r in range(3):
        rows.append(" ".join("_" if ch == "0" else ch for ch in state[3 * r:3 * r + 3]))
    return "\n".join(rows)


class Env:
    """Solve a seeded 3x3 sliding puzzle (eight-puzzle) scrambled from the goal by 6 to 24 random moves depending on difficulty: each turn the agent names one tile next to the gap (_) to slide it into the gap, and must reach the arrangement 1 2 3 / 4 5 6 / 7 8 _ within the turn limit; tiles not next to the gap and unreadable actions are explained and wasted, and reaching the goal arrangement pays 1.0."""

    name = "EightPuzzleSlide"
    setting = "game"
    max_turns = 60

    def __init__(self):
        self.state = GOAL
        self.turn = 0
        self.done = False
        self.difficulty = 0
        self.optimal = 0
        self.plan_state = ""
        self.plan = []

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        depth = SCRAMBLE[self.difficulty]
        self.plan_state = ""
        self.plan = []
        for attempt in range(50):
            state = GOAL
            last = ""
            for i in range(depth):
                gap = state.index("0")
                options = [state[p] for p in neighbours(gap) if state[p] != last]
                tile = rng.choice(options)
                state = slide(state, tile)
                last = tile
            self.state = state
            self.optimal = len(self._plan())
            if self.optimal >= max(2, depth // 2):
                break
        self.turn = 0
        self.done = False
        info = {"difficulty": self.difficulty, "scramble_moves": depth, "optimal_moves": self.optimal}
        obs = ("Sliding puzzle. Reach this goal:\n" + render(GOAL) + "\nEach turn, answer with the number of one "
               "tile next to the gap (_) to slide it into the gap. You have " + str(self.max_turns)
               + " turns. Current board:\n" + render(self.state))
        return obs, info

    def _plan(self):
        if self.plan_state != self.state:
            self.plan = solve(self.state)
            self.plan_state = self.state
        return self.plan

    def _movable(self):
        gap = self.state.index("0")
        return sorted(self.state[p] for p in neighbours(gap))

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"difficulty": self.difficulty, "turn": self.turn}
        self.turn += 1
        text = str(action)
        match = TILE_TEXT.match(text)
        reward = 0.0
        terminated = False
        if match is None:
            msg = ("Could not read a tile number from " + repr(text[:30]) + "; answer with the number of one tile "
                   "next to the gap (movable now: " + ", ".join(self._movable()) + "). "
                   "The turn is wasted.")
        else:
            tile = match.group(1)
            nxt = slide(self.state, tile) if tile != "0" else None
            if tile not in "12345678":
                msg = ("There is no tile " + tile + "; the tiles are 1 to 8 and movable now are "
                       + ", ".join(self._movable()) + ". The turn is wasted.")
            elif nxt is None:
                msg = ("Tile " + tile + " is not next to the gap; movable tiles are " + ", ".join(self._movable())
                       + ". The turn is wasted.")
            else:
                self.state = nxt
                msg = "Slid tile " + tile + "."
                if self.state == GOAL:
                    terminated = True
                    reward = 1.0
                    msg = msg + " The puzzle is solved in " + str(self.turn) + " turns!"
        truncated = (not terminated) and self.turn >= self.max_turns
        if terminated or truncated:
            self.done = True
        obs = msg + "\n" + render(self.state) + "\nTurns used: " + str(self.turn) + "/" + str(self.max_turns) + "."
        if truncated:
            obs = obs + " No turns left; the puzzle was not solved."
        info = {"difficulty": self.difficulty, "turn": self.turn, "solved": terminated}
        return obs, reward, terminated, truncated, info

    def hint(self):
        plan = self._plan()
        if not plan:
            return "The board already shows the goal."
        half = len(plan) // 2
        mid = self.state
        for tile in plan[:half]:
            mid = slide(mid, tile)
        if half == 0:
            return ("The puzzle can be solved in 1 move from here; look at which tile next to the gap belongs "
                    "where the gap is.")
        return ("The puzzle can be solved in " + str(len(plan)) + " moves from here. Halfway along a shortest "
                "solution (after " + str(half) + " moves) the board looks like this:\n" + render(mid)
                + "\nAim for that board first.")

    def oracle(self):
        plan = self._plan()
        if plan:
            return plan[0]
        gap = self.state.index("0")
        return self.state[neighbours(gap)[0]]
