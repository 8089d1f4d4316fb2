import random

WORDS = (
    "about above acorn actor adapt adult after again agent agree ahead alarm album alert alike"
    " alive allow alone along alter amber angel anger angle apple apply arena argue arise armor"
    " arrow aside audio award aware bacon badge baker basic beach beard beast begin being below"
    " bench berry birth black blade blame blank blast blend bless blind block blood bloom board"
    " boast brain brave bread break brick bride brief bring broad brown brush build cabin cable"
    " camel candy canoe cargo carry catch cause chain chair chalk charm chart chase cheap check"
    " chess chest chief child chill civic claim clean clear climb clock close cloud coach coast"
    " coral couch count cover craft crane crash cream crisp crowd crown curve cycle daily dance"
    " delta depth diary dough draft drain drama dream dress drift drink drive eagle early earth"
    " elbow empty enjoy equal event exact exist extra fable faint fairy faith false feast fence"
    " fever field fifty fight final flame flash fleet flint float flock floor flour fluid focus"
    " forge forty frame fresh front frost fruit giant glass globe glove grace grade grain grand"
    " grape grass great green grief guard guest guide habit happy harsh heart heavy honey horse"
    " hotel house human humor ideal image index inner irony ivory jelly jewel joint judge juice"
    " knife knock label lemon level light limit linen lodge logic loyal lucky lunar magic major"
    " maple march match mayor medal melon mercy metal minor model money month moral motor mount"
    " mouse mouth music nerve night noble noise north novel ocean offer olive onion opera orbit"
    " order other otter owner paint panel paper party pasta patch peace peach pearl pedal phone"
    " piano pilot pizza plain plane plant plate point polar pouch power press pride prime print"
    " prize proof proud pulse punch quest quick quiet quilt radio raise ranch range rapid raven"
    " reach ready relax rider ridge right river roast robin rocky round route royal ruler rural"
    " salad sauce scale scarf scene scout shade shake shape share shark sharp sheep shelf shell"
    " shine shirt shore short shout sight skill skirt slate sleep slice slide slope small smart"
    " smile smoke snake solar solid sound south space spare spark speak spice spine spoon sport"
    " spray squad stack staff stage stair stamp stand steam steel stick stone storm story stove"
    " straw strip sugar sunny swamp sweet table tiger toast topic torch total tower toxic trace"
    " track trade trail train treat trend trial tribe truck trust truth tulip uncle union unity"
    " upper urban usual valid value vapor vault verse video vital vivid voice wagon waste watch"
    " water whale wheat wheel while white whole witch woman world worry wrist yacht yield young"
    " youth zebra"
).split()
LIST_SIZES = [30, 50, 80, 120]
GUESS_CAP = 8


def feedback(guess, secret):
    """Wordle colouring: G = right letter in the right place, Y = in the word elsewhere, - = not (more) in the word."""
    res = ["-"] * 5
    remaining = {}
    for i in range(5):
        if guess[i] == secret[i]:
            res[i] = "G"
        else:
            remaining[secret[i]] = remaining.get(secret[i], 0) + 1
    for i in range(5):
        if res[i] != "G" and remaining.get(guess[i], 0) > 0:
            res[i] = "Y"
            remaining[guess[i]] -= 1
    return "".join(res)


def first_consistent(candidates, history):
    for w in candidates:
        ok = True
        for past in history:
            if feedback(past[0], w) != past[1]:
                ok = False
                break
        if ok:
            return w
    return candidates[0]


def oracle_length(candidates, secret):
    history = []
    for n in range(1, 20):
        g = first_consistent(candidates, history)
        if g == secret:
            return n
        history.append([g, feedback(g, secret)])
    return 99


class Env:
    """Find a seeded secret five-letter word in a Wordle-like game: the first observation lists the 30 to 120 allowed words (the list grows with the seeded difficulty) and the secret is one of them; after each guess every letter is marked G (right letter, right place), Y (in the word but elsewhere) or - (not in the word, counting repeated letters the Wordle way), so the agent must keep only the words consistent with all feedback; guesses outside the list are refused and cost a turn, and guessing the word within the turn limit pays 1.0."""

    name = "WordleListedWords"
    setting = "game"
    max_turns = 10

    def __init__(self):
        self.candidates = []
        self.secret = ""
        self.history = []
        self.turn = 0
        self.done = False
        self.difficulty = 0
        self.clue_pos = 0
        self.absent = "z"

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        self.candidates = sorted(rng.sample(WORDS, LIST_SIZES[self.difficulty]))
        self.secret = rng.choice(self.candidates)
        for attempt in range(50):
            if oracle_length(self.candidates, self.secret) <= GUESS_CAP:
                break
            self.secret = rng.choice(self.candidates)
        self.clue_pos = rng.randint(0, 4)
        missing = [c for c in "abcdefghijklmnopqrstuvwxyz" if c not in self.secret]
        self.absent = rng.choice(missing)
        self.history = []
        self.turn = 0
        self.done = False
        obs = ("Word game. The secret is one of these " + str(len(self.candidates)) + " five-letter words:\n"
               + " ".join(self.candidates) + "\n"
               + "Guess one word from the list per turn. Feedback marks each letter: G = right letter in the right place, "
               + "Y = the letter is in the word but elsewhere, - = not in the word (a repeated letter is marked Y only as often as it occurs). "
               + "You have " + str(self.max_turns) + " turns; a word not on the list is refused and still uses a turn.")
        info = {"difficulty": self.difficulty, "list_size": len(self.candidates), "turn": 0}
        return obs, info

    def _info(self, valid):
        return {"difficulty": self.difficulty, "list_size": len(self.candidates), "turn": self.turn,
                "valid": valid, "guesses": len(self.history)}

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, self._info(False)
        self.turn += 1
        word = str(action).strip().strip("\"'.!").strip().lower()
        valid = False
        if len(word) != 5 or not word.isalpha():
            obs = "Answer with a single five-letter word from the list."
        elif word not in self.candidates:
            obs = "\"" + word + "\" is not on the word list; guess one of the listed words."
        else:
            valid = True
            marks = feedback(word, self.secret)
            if word == self.secret:
                self.done = True
                return ("Guess " + word + ": " + marks + ". You found the word!", 1.0, True, False, self._info(True))
            self.history.append([word, marks])
            obs = "Guess " + word + ": " + marks + " (letters " + " ".join([word[i] + "=" + marks[i] for i in range(5)]) + ")."
        truncated = self.turn >= self.max_turns
        if truncated:
            self.done = True
            obs = obs + " Out of turns; the word was not found."
        else:
            obs = obs + " Turns left: " + str(self.max_turns - self.turn) + "."
        return obs, 0.0, False, truncated, self._info(valid)

    def hint(self):
        return ("Letter " + str(self.clue_pos + 1) + " of the secret is '" + self.secret[self.clue_pos]
                + "', and the secret has no '" + self.absent + "'. Rule out every listed word that contradicts the feedback before guessing.")

    def oracle(self):
        return first_consistent(self.candidates, self.history)
