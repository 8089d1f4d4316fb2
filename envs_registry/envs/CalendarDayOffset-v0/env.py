import random
import re

ATTEMPT_REWARDS = [1.0, 0.5, 0.25, 0.1]
DATE_ANSWER = re.compile(r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})\s*\.?\s*$")
MONTH_NAMES = ["January", "February", "March", "April", "May", "June", "July",
               "August", "September", "October", "November", "December"]


def is_leap(year):
    return (year % 4 == 0 and year % 100 != 0) or year % 400 == 0


def month_length(year, month):
    if month == 2:
        return 29 if is_leap(year) else 28
    if month in [4, 6, 9, 11]:
        return 30
    return 31


def to_ordinal(year, month, day):
    # days since 0000-03-01 style civil calendar (proleptic Gregorian)
    y = year
    m = month
    if m <= 2:
        y -= 1
    era = y // 400
    yoe = y - era * 400
    mp = (m + 9) % 12
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe


def from_ordinal(z):
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    if m <= 2:
        y += 1
    return [y, m, d]


def fmt(date):
    return str(date[0]).zfill(4) + "-" + str(date[1]).zfill(2) + "-" + str(date[2]).zfill(2)


def spoken(date):
    return MONTH_NAMES[date[1] - 1] + " " + str(date[2]) + ", " + str(date[0])


class Env:
    """Gregorian calendar arithmetic: starting from a seeded date, move forward or backward by a seeded number of days (one shift on easy levels, two chained shifts on the hardest level, with spans from a few weeks up to several decades crossing month ends and leap years) and answer with the resulting date as YYYY-MM-DD; the agent has four attempts, a wrong date is answered with "too early" or "too late" plus which of year, month and day are already right, and a correct answer pays 1.0 on the first attempt, 0.5 on the second, 0.25 on the third and 0.1 on the fourth."""

    name = "CalendarDayOffset"
    setting = "reasoning"
    max_turns = 4

    def __init__(self):
        self.start = [2000, 1, 1]
        self.shifts = []
        self.mid = [2000, 1, 1]
        self.first = [2000, 1, 1]
        self.answer = [2000, 1, 1]
        self.answer_ord = 0
        self.turn = 0
        self.done = False
        self.difficulty = 0

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        spans = [[5, 60], [40, 400], [300, 3000], [1000, 20000]]
        low, high = spans[self.difficulty]
        year = rng.randint(1901, 2099)
        month = rng.randint(1, 12)
        day = rng.randint(1, month_length(year, month))
        if self.difficulty >= 1 and rng.random() < 0.4:
            month = rng.choice([2, 2, 12])
            day = rng.randint(max(1, month_length(year, month) - 3), month_length(year, month))
        self.start = [year, month, day]
        n_shifts = 2 if self.difficulty == 3 else 1
        ordinal = to_ordinal(year, month, day)
        shifts = []
        for i in range(n_shifts):
            k = rng.randint(low, high)
            sign = rng.choice([1, -1])
            if i == 1:
                sign = -shifts[0][0]
                k = rng.randint(low // 2, high // 2)
            new_ord = ordinal + sign * k
            date = from_ordinal(new_ord)
            if date[0] < 1700 or date[0] > 2400:
                sign = -sign
                new_ord = ordinal + sign * k
            shifts.append([sign, k])
            ordinal = new_ord
        self.shifts = shifts
        self.first = from_ordinal(to_ordinal(year, month, day) + shifts[0][0] * shifts[0][1])
        self.answer_ord = ordinal
        self.answer = from_ordinal(ordinal)
        half = shifts[0][1] // 2
        self.mid = from_ordinal(to_ordinal(year, month, day) + shifts[0][0] * half)
        self.turn = 0
        self.done = False
        lines = ["Start date: " + spoken(self.start) + " (" + fmt(self.start) + "), Gregorian calendar."]
        for i in range(len(shifts)):
            direction = "forward" if shifts[i][0] > 0 else "backward"
            what = "Then move " if i > 0 else "Move "
            lines.append(what + direction + " by " + str(shifts[i][1]) + " days.")
        lines.append("Which date do you reach? Answer with the date only, in the form YYYY-MM-DD. You have "
                     + str(self.max_turns) + " attempts; after a wrong date you are told whether it is too early or too late "
                     + "and which of year, month and day already match.")
        info = {"difficulty": self.difficulty, "shifts": len(shifts), "attempts_left": self.max_turns}
        return "\n".join(lines), info

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"attempt": self.turn, "correct": False}
        self.turn += 1
        text = str(action)
        match = DATE_ANSWER.match(text)
        reward = 0.0
        terminated = False
        correct = False
        left = self.max_turns - self.turn
        if match is None:
            obs = ("Could not read a date in the form YYYY-MM-DD from your answer; it counts as an attempt. Attempts left: "
                   + str(left) + ".")
        else:
            y = int(match.group(1))
            m = int(match.group(2))
            d = int(match.group(3))
            if m < 1 or m > 12 or d < 1 or d > month_length(y, m):
                obs = (fmt([y, m, d]) + " is not a valid calendar date; it counts as an attempt. Attempts left: "
                       + str(left) + ".")
            else:
                guess_ord = to_ordinal(y, m, d)
                if guess_ord == self.answer_ord:
                    correct = True
                    terminated = True
                    reward = ATTEMPT_REWARDS[self.turn - 1]
                    obs = "Correct! The date is " + fmt(self.answer) + "."
                else:
                    where = "too late" if guess_ord > self.answer_ord else "too early"
                    parts = []
                    names = ["year", "month", "day"]
                    guess = [y, m, d]
                    for i in range(3):
                        parts.append(names[i] + (" right" if guess[i] == self.answer[i] else " wrong"))
                    obs = ("Wrong: " + fmt(guess) + " is " + where + " (" + ", ".join(parts) + "). Attempts left: "
                           + str(left) + ".")
        truncated = (not terminated) and self.turn >= self.max_turns
        if terminated or truncated:
            self.done = True
        if truncated:
            obs = obs + " No attempts left."
        info = {"attempt": self.turn, "correct": correct, "attempts_left": left}
        return obs, reward, terminated, truncated, info

    def hint(self):
        half = self.shifts[0][1] // 2
        direction = "forward" if self.shifts[0][0] > 0 else "backward"
        leaps = []
        lo = min(self.start[0], self.first[0], self.answer[0])
        hi = max(self.start[0], self.first[0], self.answer[0])
        for y in range(lo, hi + 1):
            if is_leap(y) and len(leaps) < 14:
                leaps.append(str(y))
        text = ("Split the first move: going " + direction + " " + str(half) + " days from the start lands on "
                + spoken(self.mid) + "; continue from there with the remaining " + str(self.shifts[0][1] - half)
                + " days.")
        if leaps:
            text = text + " Leap years between the dates involved: " + ", ".join(leaps) + "."
        return text

    def oracle(self):
        return fmt(self.answer)
