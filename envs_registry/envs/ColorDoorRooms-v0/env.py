import random
import re

ROOMS = 1
N_DOORS = 3
SIDES = ["left", "right", "middle"]
THINGS = {"grass": "green", "the sky": "blue", "a ripe tomato": "red", "snow": "white", "coal": "black",
          "a banana": "yellow", "an orange": "orange"}


class Env:
    """Walk through ROOMS rooms (one more on harder seeds); each has N_DOORS coloured doors and a clue naming a thing whose colour is the colour of the treasure door. The move is the side of that door (left, right or middle; an answer naming exactly one side counts); a right door pays an equal share and leads on, a wrong door ends the game, so success needs every room right. The hint gives the colour of every clue's thing, then asks again."""

    name = "ColorDoorRooms"
    setting = "game"
    max_turns = ROOMS + 1

    def __init__(self):
        self.rooms = []
        self.room = 0
        self.done = False

    def reset(self, seed):
        rng = random.Random(seed)
        n = ROOMS + rng.randint(0, 1)
        self.rooms = []
        for _ in range(n):
            things = rng.sample(sorted(THINGS), N_DOORS)
            sides = SIDES[:N_DOORS]
            self.rooms.append((things[0], dict(zip(sides, [THINGS[t] for t in rng.sample(things, N_DOORS)]))))
        self.room = 0
        self.done = False
        return self._describe(), {"difficulty": n, "rooms": n}

    def _describe(self):
        thing, doors = self.rooms[self.room]
        shown = ", ".join(side + " door is " + color for side, color in doors.items())
        return ("Room " + str(self.room + 1) + " of " + str(len(self.rooms)) + ". The " + shown
                + ". The treasure is behind the door with the colour of " + thing + ". Moves: "
                + ", ".join(doors) + ".")

    def _answer(self):
        thing, doors = self.rooms[self.room]
        return [side for side, color in doors.items() if color == THINGS[thing]][0]

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {"correct": False}
        said = [side for side in self.rooms[self.room][1] if re.search(r"\b" + side + r"\b", str(action).lower())]
        if said != [self._answer()]:
            self.done = True
            return "Wrong door. The game is over.", 0.0, True, False, {"correct": False}
        self.room += 1
        reward = 1.0 / len(self.rooms)
        if self.room == len(self.rooms):
            self.done = True
            return "You found all the treasure!", reward, True, False, {"correct": True}
        return "Treasure found. " + self._describe(), reward, False, False, {"correct": True}

    def hint(self):
        colours = "; ".join(thing + " is " + THINGS[thing] for thing, _ in self.rooms[self.room:])
        return "Colours: " + colours + ". Which door has the treasure?"

    def oracle(self):
        return self._answer()
