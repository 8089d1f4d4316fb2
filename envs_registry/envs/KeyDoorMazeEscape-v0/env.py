import random
from collections import deque

MOVE_NAMES = ["up", "down", "left", "right"]
MOVE_DELTAS = {"up": [-1, 0], "down": [1, 0], "left": [0, -1], "right": [0, 1]}
KEY_LETTERS = ["a", "b", "c"]
DOOR_LETTERS = ["A", "B", "C"]


def carve_maze(rng, cells):
    """A perfect maze (a spanning tree) on cells x cells rooms, drawn on a (2*cells+1) character grid."""
    size = 2 * cells + 1
    grid = []
    for r in range(size):
        grid.append(["#"] * size)
    start = [rng.randrange(cells), rng.randrange(cells)]
    seen = {(start[0], start[1]): True}
    stack = [start]
    grid[2 * start[0] + 1][2 * start[1] + 1] = "."
    while stack:
        cr, cc = stack[-1]
        options = []
        for name in MOVE_NAMES:
            dr, dc = MOVE_DELTAS[name]
            nr, nc = cr + dr, cc + dc
            if 0 <= nr < cells and 0 <= nc < cells and (nr, nc) not in seen:
                options.append([nr, nc, dr, dc])
        if not options:
            stack.pop()
            continue
        nr, nc, dr, dc = rng.choice(options)
        seen[(nr, nc)] = True
        grid[2 * cr + 1 + dr][2 * cc + 1 + dc] = "."
        grid[2 * nr + 1][2 * nc + 1] = "."
        stack.append([nr, nc])
    return grid


def path_between(grid, start, goal):
    """Unique shortest path (list of [r, c]) between two open cells, ignoring doors and keys."""
    prev = {(start[0], start[1]): None}
    queue = deque([(start[0], start[1])])
    while queue:
        cur = queue.popleft()
        if cur == (goal[0], goal[1]):
            break
        for name in MOVE_NAMES:
            dr, dc = MOVE_DELTAS[name]
            nxt = (cur[0] + dr, cur[1] + dc)
            if grid[nxt[0]][nxt[1]] != "#" and nxt not in prev:
                prev[nxt] = cur
                queue.append(nxt)
    out = []
    cur = (goal[0], goal[1])
    while cur is not None:
        out.append([cur[0], cur[1]])
        cur = prev[cur]
    out.reverse()
    return out


def region(grid, start, blocked):
    """Open cells reachable from start without entering any cell listed in blocked."""
    stop = {}
    for cell in blocked:
        stop[(cell[0], cell[1])] = True
    seen = {(start[0], start[1]): True}
    order = [[start[0], start[1]]]
    queue = deque([(start[0], start[1])])
    while queue:
        cur = queue.popleft()
        for name in MOVE_NAMES:
            dr, dc = MOVE_DELTAS[name]
            nxt = (cur[0] + dr, cur[1] + dc)
            if grid[nxt[0]][nxt[1]] != "#" and nxt not in seen and nxt not in stop:
                seen[nxt] = True
                order.append([nxt[0], nxt[1]])
                queue.append(nxt)
    return order


class Env:
    """Solve a seeded key-and-door maze: the agent (@) moves up, down, left or right through a perfect maze whose only route to the exit G is barred by one or two locked doors (capital letters), each opened by walking into it while carrying the matching lowercase key, which is picked up by stepping on it and usually lies down a side branch; larger mazes and a second door come with higher difficulty, bumping into a wall or a locked door wastes a move, and reaching G pays 1.0."""

    name = "KeyDoorMazeEscape"
    setting = "game"
    max_turns = 160

    def __init__(self):
        self.grid = []
        self.agent = [1, 1]
        self.goal = [1, 1]
        self.keys = {}
        self.doors = {}
        self.held = []
        self.turn = 0
        self.done = False
        self.difficulty = 0
        self.optimal = 0

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        cells = [4, 5, 6, 7][self.difficulty]
        n_doors = [1, 1, 2, 2][self.difficulty]
        best = None
        for attempt in range(60):
            grid = carve_maze(rng, cells)
            opens = []
            for r in range(len(grid)):
                for c in range(len(grid)):
                    if grid[r][c] == "." and r % 2 == 1 and c % 2 == 1:
                        opens.append([r, c])
            start, goal = rng.sample(opens, 2)
            path = path_between(grid, start, goal)
            if len(path) < 4 * cells:
                continue
            # doors sit on corridor cells (between rooms) of the start-goal path
            corridor = []
            for i in range(2, len(path) - 2):
                if path[i][0] % 2 == 0 or path[i][1] % 2 == 0:
                    corridor.append(i)
            if len(corridor) < n_doors:
                continue
            if n_doors == 1:
                lo = len(path) // 3
                choices = [i for i in corridor if i >= lo and i <= len(path) - 3]
                door_idx = [rng.choice(choices if choices else corridor)]
            else:
                first = [i for i in corridor if len(path) // 5 <= i <= len(path) // 2]
                second = [i for i in corridor if i > len(path) // 2 + 1]
                if not first or not second:
                    continue
                door_idx = [rng.choice(first), rng.choice(second)]
            door_cells = [path[i] for i in door_idx]
            key_cells = []
            ok = True
            on_path = {}
            for cell in path:
                on_path[(cell[0], cell[1])] = True
            for k in range(n_doors):
                # key k must be reachable with doors < k open and doors >= k closed
                reach = region(grid, start, door_cells[k:])
                if k > 0:
                    before = region(grid, start, door_cells[k - 1:])
                    inside = {}
                    for cell in before:
                        inside[(cell[0], cell[1])] = True
                    reach = [cell for cell in reach if (cell[0], cell[1]) not in inside]
                cands = [cell for cell in reach
                         if (cell[0], cell[1]) not in on_path and cell[0] % 2 == 1 and cell[1] % 2 == 1
                         and cell not in key_cells]
                if not cands:
                    cands = [cell for cell in reach if cell != start and cell not in key_cells
                             and cell not in door_cells and cell[0] % 2 == 1 and cell[1] % 2 == 1]
                if not cands:
                    ok = False
                    break
                key_cells.append(rng.choice(cands))
            if not ok:
                continue
            best = [grid, start, goal, door_cells, key_cells]
            self.grid = grid
            self.agent = list(start)
            self.goal = list(goal)
            self.keys = {}
            self.doors = {}
            for k in range(n_doors):
                self.keys[KEY_LETTERS[k]] = list(key_cells[k])
                self.doors[DOOR_LETTERS[k]] = list(door_cells[k])
            self.held = []
            self.optimal = len(self._plan())
            if self.optimal <= self.max_turns - 40:
                break
        if best is None:
            # fallback that cannot fail: an open corridor with a key behind the start
            size = 2 * cells + 1
            self.grid = []
            for r in range(size):
                self.grid.append(["#"] * size)
            for c in range(1, size - 1):
                self.grid[1][c] = "."
            self.agent = [1, 2]
            self.goal = [1, size - 2]
            self.keys = {"a": [1, 1]}
            self.doors = {"A": [1, size // 2]}
            self.held = []
        self.held = []
        self.turn = 0
        self.done = False
        self.optimal = len(self._plan())
        info = {"difficulty": self.difficulty, "size": len(self.grid), "doors": len(self.doors),
                "optimal_moves": self.optimal}
        intro = ("Escape the maze: move @ to the exit G with up, down, left or right (one move per turn). "
                 "# is wall. Locked doors are capital letters; step onto the matching lowercase key to pick it up, "
                 "then walk into the door to open it. You have " + str(self.max_turns) + " moves.")
        return intro + "\n" + self._render(), info

    def _cell_kind(self, r, c):
        for letter in sorted(self.doors):
            if self.doors[letter] == [r, c]:
                return letter
        for letter in sorted(self.keys):
            if self.keys[letter] == [r, c] and letter not in self.held:
                return letter
        return self.grid[r][c]

    def _render(self):
        lines = []
        for r in range(len(self.grid)):
            chars = []
            for c in range(len(self.grid)):
                if [r, c] == self.agent:
                    chars.append("@")
                elif [r, c] == self.goal:
                    chars.append("G")
                else:
                    chars.append(self._cell_kind(r, c))
            lines.append("".join(chars))
        carrying = ", ".join(sorted(self.held)) if self.held else "nothing"
        return "\n".join(lines) + "\nCarrying: " + carrying + ". Moves used: " + str(self.turn) + "/" + str(self.max_turns) + "."

    def _plan(self):
        """Shortest list of moves from the current state (position, keys held) to G; doors open with keys."""
        letters = sorted(self.keys)
        start_mask = 0
        for i in range(len(letters)):
            if letters[i] in self.held:
                start_mask += 1 << i
        door_at = {}
        for i in range(len(letters)):
            d = self.doors[DOOR_LETTERS[i]]
            door_at[(d[0], d[1])] = i
        key_at = {}
        for i in range(len(letters)):
            k = self.keys[letters[i]]
            key_at[(k[0], k[1])] = i
        start = (self.agent[0], self.agent[1], start_mask)
        prev = {start: None}
        queue = deque([start])
        found = None
        while queue:
            cur = queue.popleft()
            if cur[0] == self.goal[0] and cur[1] == self.goal[1]:
                found = cur
                break
            for name in MOVE_NAMES:
                dr, dc = MOVE_DELTAS[name]
                nr, nc = cur[0] + dr, cur[1] + dc
                if nr < 0 or nc < 0 or nr >= len(self.grid) or nc >= len(self.grid) or self.grid[nr][nc] == "#":
                    continue
                if (nr, nc) in door_at and not (cur[2] >> door_at[(nr, nc)]) & 1:
                    continue
                mask = cur[2]
                if (nr, nc) in key_at:
                    mask = mask | (1 << key_at[(nr, nc)])
                nxt = (nr, nc, mask)
                if nxt not in prev:
                    prev[nxt] = [cur, name]
                    queue.append(nxt)
        if found is None:
            return []
        moves = []
        cur = found
        while prev[cur] is not None:
            moves.append(prev[cur][1])
            cur = prev[cur][0]
        moves.reverse()
        return moves

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"difficulty": self.difficulty, "turn": self.turn}
        self.turn += 1
        text = str(action).strip().lower().strip(".!\"' ")
        reward = 0.0
        terminated = False
        if text not in MOVE_DELTAS:
            msg = ("Could not read a move from " + repr(str(action)[:30]) + "; answer with exactly one of "
                   "up, down, left, right. The move is wasted.")
        else:
            dr, dc = MOVE_DELTAS[text]
            nr, nc = self.agent[0] + dr, self.agent[1] + dc
            kind = self._cell_kind(nr, nc)
            if kind == "#":
                msg = "You bump into a wall; you stay where you are."
            elif kind in DOOR_LETTERS:
                key = KEY_LETTERS[DOOR_LETTERS.index(kind)]
                if key in self.held:
                    self.agent = [nr, nc]
                    msg = "You unlock door " + kind + " with key " + key + " and step through."
                else:
                    msg = "Door " + kind + " is locked; you need key " + key + " first."
            else:
                self.agent = [nr, nc]
                msg = "You move " + text + "."
                if kind in KEY_LETTERS and kind in self.keys:
                    self.held.append(kind)
                    self.held = sorted(self.held)
                    msg = "You move " + text + " and pick up key " + kind + "."
            if self.agent == self.goal:
                terminated = True
                reward = 1.0
                msg = "You reach the exit G in " + str(self.turn) + " moves. Solved!"
        truncated = (not terminated) and self.turn >= self.max_turns
        if terminated or truncated:
            self.done = True
        obs = msg + "\n" + self._render()
        if truncated:
            obs = obs + "\nOut of moves; the exit was not reached."
        info = {"difficulty": self.difficulty, "turn": self.turn, "keys_held": list(self.held),
                "solved": terminated}
        return obs, reward, terminated, truncated, info

    def hint(self):
        plan = self._plan()
        r, c = self.agent
        steps = []
        letters = sorted(self.keys)
        held = list(self.held)
        for move in plan:
            dr, dc = MOVE_DELTAS[move]
            r, c = r + dr, c + dc
            for letter in letters:
                if self.keys[letter] == [r, c] and letter not in held:
                    held.append(letter)
                    steps.append("pick up key " + letter + " (row " + str(r) + ", column " + str(c) + ")")
            for i in range(len(letters)):
                if self.doors[DOOR_LETTERS[i]] == [r, c] and ("open door " + DOOR_LETTERS[i]) not in steps:
                    steps.append("open door " + DOOR_LETTERS[i])
        steps.append("walk to G")
        return ("Rows and columns count from 0 at the top-left. Plan: " + ", then ".join(steps)
                + ". The shortest route from here takes " + str(len(plan)) + " moves; dead ends are common, "
                "so trace the corridor to each target before moving.")

    def oracle(self):
        plan = self._plan()
        if plan:
            return plan[0]
        return "up"
