import random
import re

CELL = re.compile(r"^\s*([1-9])\s*\.?\s*$")
LINES = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]]
DEPTHS = [2, 3, 4, 5]


def winner(board):
    for line in LINES:
        a = board[line[0]]
        if a != "." and a == board[line[1]] and a == board[line[2]]:
            return a
    return None


def search(board, player, depth, ply):
    """Depth-limited minimax score from O's point of view (a quicker win scores higher)."""
    w = winner(board)
    if w == "O":
        return 10 - ply
    if w == "X":
        return ply - 10
    if "." not in board or depth == 0:
        return 0
    other = "X" if player == "O" else "O"
    best = None
    for i in range(9):
        if board[i] == ".":
            board[i] = player
            v = search(board, other, depth - 1, ply + 1)
            board[i] = "."
            if best is None or (player == "O" and v > best) or (player == "X" and v < best):
                best = v
    return best


def show(board):
    rows = []
    for r in range(3):
        cells = []
        for c in range(3):
            k = 3 * r + c
            cells.append(board[k] if board[k] != "." else str(k + 1))
        rows.append(" " + " | ".join(cells))
    return "\n---+---+---\n".join(rows)


class Opponent(object):
    def __init__(self, depth, order):
        self.depth = depth
        self.order = order
        self.cache = {}

    def move(self, board):
        key = "".join(board)
        if key in self.cache:
            return self.cache[key]
        best = None
        choice = -1
        for i in self.order:
            if board[i] == ".":
                board[i] = "O"
                v = search(board, "X", self.depth - 1, 1)
                board[i] = "."
                if best is None or v > best:
                    best = v
                    choice = i
        self.cache[key] = choice
        return choice


def winning_cell(board, opponent):
    """A cell for X that forces a win against this exact opponent, or -1."""
    for i in range(9):
        if board[i] == ".":
            board[i] = "X"
            won = winner(board) == "X"
            board[i] = "."
            if won:
                return i
    for i in range(9):
        if board[i] == ".":
            nxt = list(board)
            nxt[i] = "X"
            if "." not in nxt:
                continue
            reply = opponent.move(nxt)
            nxt[reply] = "O"
            if winner(nxt) == "O":
                continue
            if winning_cell(nxt, opponent) >= 0:
                return i
    return -1


class Env:
    """Win a game of tic-tac-toe as X against a shallow minimax opponent: the game opens with one seeded random X and O each on a 3x3 board with cells numbered 1-9, the agent moves next and answers with one cell number per move, the opponent O looks only a seeded-difficulty number of half-moves ahead (two to five) and breaks ties by a fixed seeded preference order of cells, so it can be lured into forks it does not foresee; every seed is winnable against this exact opponent, illegal moves are explained and cost a turn, a win pays 1.0 and a draw or loss pays 0."""

    name = "TicTacToeBeatShallowMinimax"
    setting = "game"
    max_turns = 8

    def __init__(self):
        self.board = ["."] * 9
        self.opponent = Opponent(2, list(range(9)))
        self.turn = 0
        self.done = False
        self.difficulty = 0

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        depth = DEPTHS[self.difficulty]
        order = list(range(9))
        board = ["."] * 9
        for attempt in range(200):
            rng.shuffle(order)
            opp = Opponent(depth, list(order))
            pair = rng.sample(list(range(9)), 2)
            board = ["."] * 9
            board[pair[0]] = "X"
            board[pair[1]] = "O"
            if winning_cell(list(board), opp) >= 0:
                break
        self.opponent = opp
        self.board = board
        self.turn = 0
        self.done = False
        obs = ("Tic-tac-toe. You are X, the opponent is O. The game opened with one random move each, and it is your turn. Board (numbers are free cells):\n"
               + show(self.board) + "\n"
               + "Answer with the number (1-9) of a free cell. Three in a row wins; only a win counts, a draw is a failure. "
               + "The opponent is a minimax player that looks only " + str(depth) + " half-moves ahead. You have " + str(self.max_turns)
               + " turns; an illegal move is refused and still uses a turn.")
        info = {"difficulty": self.difficulty, "lookahead": depth, "board": "".join(self.board), "turn": 0}
        return obs, info

    def _info(self, legal):
        return {"difficulty": self.difficulty, "lookahead": self.opponent.depth, "board": "".join(self.board),
                "turn": self.turn, "legal": legal}

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, self._info(False)
        self.turn += 1
        match = CELL.match(str(action))
        legal = False
        if match is None:
            obs = "Could not read a move; answer with one cell number from 1 to 9.\n" + show(self.board)
        else:
            k = int(match.group(1)) - 1
            if self.board[k] != ".":
                obs = "Cell " + str(k + 1) + " is already taken; choose a free cell.\n" + show(self.board)
            else:
                legal = True
        if legal:
            self.board[k] = "X"
            if winner(self.board) == "X":
                self.done = True
                return ("You played " + str(k + 1) + " and made three in a row. You win!\n" + show(self.board),
                        1.0, True, False, self._info(True))
            if "." not in self.board:
                self.done = True
                return ("You played " + str(k + 1) + ". The board is full: a draw, which does not count as a win.\n"
                        + show(self.board), 0.0, True, False, self._info(True))
            reply = self.opponent.move(self.board)
            self.board[reply] = "O"
            obs = "You played " + str(k + 1) + ". O played " + str(reply + 1) + ".\n" + show(self.board)
            if winner(self.board) == "O":
                self.done = True
                return obs + "\nO made three in a row. You lose.", 0.0, True, False, self._info(True)
            obs = obs + "\nYour move."
        truncated = self.turn >= self.max_turns
        if truncated:
            self.done = True
            obs = obs + "\nOut of turns; the game is abandoned."
        return obs, 0.0, False, truncated, self._info(legal)

    def hint(self):
        prefs = [str(i + 1) for i in self.opponent.order]
        return ("O searches only " + str(self.opponent.depth) + " half-moves ahead (its own move included) and, among equally scored moves, "
                + "prefers cells in the order " + ", ".join(prefs) + ". Set up a fork - two open lines at once - that O cannot see coming, "
                + "and always block O's open lines first.")

    def oracle(self):
        k = winning_cell(self.board, self.opponent)
        if k < 0:
            for i in range(9):
                if self.board[i] == ".":
                    return str(i + 1)
            return "1"
        return str(k + 1)
