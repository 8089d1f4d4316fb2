import json
import random
from fractions import Fraction

DISHES = ["pancakes", "waffles", "risotto", "curry", "chili", "muffins", "lasagna", "soup",
          "brownies", "stew", "pilaf", "omelette", "gratin", "scones"]
VOLUME_ITEMS = ["milk", "water", "olive oil", "cream", "broth", "honey", "vinegar", "yogurt", "soy sauce"]
MASS_ITEMS = ["flour", "sugar", "butter", "cheese", "rice", "chicken", "oats", "chocolate"]
# units per family: name -> size in ml or g
VOLUME_UNITS = {"cup": Fraction(240), "tbsp": Fraction(15), "tsp": Fraction(5), "ml": Fraction(1)}
MASS_UNITS = {"g": Fraction(1), "oz": Fraction(2835, 100), "lb": Fraction(4536, 10)}
# nice amounts per unit, as (low, high, step) in that unit
AMOUNTS = {"cup": [Fraction(1, 4), Fraction(3), Fraction(1, 4)], "tbsp": [Fraction(1), Fraction(6), Fraction(1)],
           "tsp": [Fraction(1, 2), Fraction(4), Fraction(1, 2)], "ml": [Fraction(50), Fraction(500), Fraction(25)],
           "g": [Fraction(25), Fraction(800), Fraction(25)], "oz": [Fraction(2), Fraction(16), Fraction(1)],
           "lb": [Fraction(1, 2), Fraction(3), Fraction(1, 4)]}
ALIASES = {"cup": "cup", "cups": "cup", "c": "cup", "tbsp": "tbsp", "tablespoon": "tbsp", "tablespoons": "tbsp",
           "tsp": "tsp", "teaspoon": "tsp", "teaspoons": "tsp", "ml": "ml", "milliliter": "ml", "milliliters": "ml",
           "millilitre": "ml", "millilitres": "ml", "g": "g", "gram": "g", "grams": "g", "oz": "oz", "ounce": "oz",
           "ounces": "oz", "lb": "lb", "lbs": "lb", "pound": "lb", "pounds": "lb"}
UNIT_WORDS = {"cup": "cups", "tbsp": "tablespoons (tbsp)", "tsp": "teaspoons (tsp)", "ml": "millilitres (ml)",
              "g": "grams (g)", "oz": "ounces (oz)", "lb": "pounds (lb)"}


def family(unit):
    return "volume" if unit in VOLUME_UNITS else "mass"


def unit_size(unit):
    return VOLUME_UNITS[unit] if unit in VOLUME_UNITS else MASS_UNITS[unit]


def show(q):
    """A Fraction (or number) as a short decimal string."""
    v = float(q)
    if v == int(v) and abs(v) < 1e12:
        return str(int(v))
    return f"{v:.6g}"


def as_number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and -10 ** 12 < value < 10 ** 12:
        return float(value)
    if isinstance(value, float) and -1e12 < value < 1e12:
        return value
    if isinstance(value, str):
        try:
            v = float(value.strip())
        except ValueError:
            return None
        if -1e12 < v < 1e12:
            return v
    return None


def nice_amount(rng, unit):
    low, high, step = AMOUNTS[unit]
    n = int((high - low) / step)
    return low + step * rng.randint(0, n)


class Env:
    """Answer a cooking question through a small recipe-book API: the agent must scale a recipe card to a requested number of servings and convert the ingredient into the requested unit before reporting the amount, calling get_recipe(recipe), scale_recipe(recipe, servings), convert_unit(amount, from_unit, to_unit) and submit(amount) as JSON tool calls such as {"name": "scale_recipe", "arguments": {"recipe": "pancakes", "servings": 6}}; recipe contents are hidden until looked up, harder seeds need fractional scale factors, conversions between kitchen units and finally the sum of one ingredient over two scaled recipes, and submit ends the episode paying 1.0 only when the amount is within 1% of the true value."""

    name = "RecipeScaleConvert"
    setting = "tool_use"
    max_turns = 12
    tools = [
        {"type": "function", "function": {
            "name": "get_recipe",
            "description": "Show a recipe card: the servings it is written for and each ingredient's amount and unit.",
            "parameters": {"type": "object",
                           "properties": {"recipe": {"type": "string", "description": "Recipe name, e.g. pancakes."}},
                           "required": ["recipe"]}}},
        {"type": "function", "function": {
            "name": "scale_recipe",
            "description": "Return the recipe's ingredient amounts scaled to a number of servings (units unchanged).",
            "parameters": {"type": "object",
                           "properties": {"recipe": {"type": "string"},
                                          "servings": {"type": "integer", "minimum": 1}},
                           "required": ["recipe", "servings"]}}},
        {"type": "function", "function": {
            "name": "convert_unit",
            "description": "Convert an amount between kitchen units of the same kind: volume (cup, tbsp, tsp, ml) or mass (g, oz, lb).",
            "parameters": {"type": "object",
                           "properties": {"amount": {"type": "number"},
                                          "from_unit": {"type": "string"},
                                          "to_unit": {"type": "string"}},
                           "required": ["amount", "from_unit", "to_unit"]}}},
        {"type": "function", "function": {
            "name": "submit",
            "description": "Report the requested amount, in the requested unit; ends the episode.",
            "parameters": {"type": "object",
                           "properties": {"amount": {"type": "number"}},
                           "required": ["amount"]}}},
    ]

    def __init__(self):
        self.level = 0
        self.book = {}
        self.order = []
        self.needed = []
        self.ingredient = "milk"
        self.target_unit = "ml"
        self.answer = Fraction(0)
        self.scaled = []
        self.turn = 0
        self.finished = False

    def reset(self, seed):
        rng = random.Random(seed)
        self.level = rng.randint(0, 3)
        n_recipes = 3 + (self.level + 1) // 2
        self.order = sorted(rng.sample(DISHES, n_recipes))
        fam = rng.choice(["volume", "mass"])
        items = VOLUME_ITEMS if fam == "volume" else MASS_ITEMS
        units = sorted(VOLUME_UNITS.keys()) if fam == "volume" else sorted(MASS_UNITS.keys())
        self.ingredient = rng.choice(items)
        n_needed = 2 if self.level == 3 else 1
        chosen = rng.sample(self.order, n_needed)
        self.book = {}
        for dish in self.order:
            base = rng.choice([2, 4, 6, 8])
            pool = [x for x in VOLUME_ITEMS + MASS_ITEMS if x != self.ingredient]
            names = rng.sample(pool, rng.randint(3, 5))
            if dish in chosen or rng.random() < 0.5:
                names.insert(rng.randint(0, len(names)), self.ingredient)
            lines = []
            for item in names:
                if item == self.ingredient:
                    unit = rng.choice(units)
                else:
                    unit = rng.choice(sorted(VOLUME_UNITS.keys()) if item in VOLUME_ITEMS else sorted(MASS_UNITS.keys()))
                lines.append([item, nice_amount(rng, unit), unit])
            self.book[dish] = {"servings": base, "lines": lines}
        self.needed = []
        for dish in chosen:
            base = self.book[dish]["servings"]
            if self.level == 0:
                servings = base * rng.randint(2, 3)
            else:
                servings = rng.randint(2, 20)
                while servings % base == 0:
                    servings = rng.randint(2, 20)
            self.needed.append([dish, servings])
        src_unit = self._line(chosen[0])[2]
        if self.level == 0:
            self.target_unit = src_unit
        elif self.level == 1:
            self.target_unit = "ml" if fam == "volume" else "g"
            if src_unit == self.target_unit:
                self.target_unit = "cup" if fam == "volume" else "oz"
        else:
            options = [u for u in units if u != src_unit and Fraction(1, 4) <= self._total(u) <= 10000]
            if not options:
                options = [u for u in units if u != src_unit]
            self.target_unit = rng.choice(options)
        self.answer = self._total(self.target_unit)
        self.scaled = []
        self.turn = 0
        self.finished = False
        if len(self.needed) == 1:
            task = ("You are making " + self.needed[0][0] + " for " + str(self.needed[0][1]) + " people. How much "
                    + self.ingredient + " do you need, in " + UNIT_WORDS[self.target_unit] + "?")
        else:
            task = ("You are making " + self.needed[0][0] + " for " + str(self.needed[0][1]) + " people and "
                    + self.needed[1][0] + " for " + str(self.needed[1][1]) + " people. How much "
                    + self.ingredient + " do you need in total, in " + UNIT_WORDS[self.target_unit] + "?")
        obs = ("The recipe book holds: " + ", ".join(self.order) + " (card contents are hidden until you call get_recipe).\n"
               + "Task: " + task + " Report the number with submit(amount); answers within 1% count.\n"
               + "Tools: get_recipe(recipe), scale_recipe(recipe, servings), convert_unit(amount, from_unit, to_unit), "
               + "submit(amount). Reply with one JSON tool call, e.g. {\"name\": \"get_recipe\", \"arguments\": {\"recipe\": \""
               + self.order[0] + "\"}}. You have " + str(self.max_turns) + " calls.")
        info = {"difficulty": self.level, "recipes": list(self.order), "needed": len(self.needed),
                "ingredient": self.ingredient, "unit": self.target_unit}
        return obs, info

    def _total(self, unit):
        total = Fraction(0)
        for dish, servings in self.needed:
            line = self._line(dish)
            amount = line[1] * Fraction(servings, self.book[dish]["servings"])
            total += amount * unit_size(line[2]) / unit_size(unit)
        return total

    def _line(self, dish):
        for line in self.book[dish]["lines"]:
            if line[0] == self.ingredient:
                return line
        return None

    def _info(self, error):
        return {"difficulty": self.level, "turn": self.turn, "error": error}

    def _end(self, obs, error):
        truncated = self.turn >= self.max_turns
        if truncated:
            self.finished = True
            obs = obs + " Out of calls."
        return obs, 0.0, False, truncated, self._info(error)

    def _card(self, dish, factor):
        parts = []
        for item, amount, unit in self.book[dish]["lines"]:
            parts.append(item + " " + show(amount * factor) + " " + unit)
        return "; ".join(parts)

    def _recipe(self, args):
        dish = args.get("recipe")
        dish = dish.strip().lower() if isinstance(dish, str) else None
        if dish not in self.book:
            return None
        return dish

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
        if name == "get_recipe":
            dish = self._recipe(args)
            if dish is None:
                return self._end("Error: unknown recipe. The book holds: " + ", ".join(self.order) + ".", True)
            return self._end(dish + " (serves " + str(self.book[dish]["servings"]) + "): "
                             + self._card(dish, Fraction(1)) + ".", False)
        if name == "scale_recipe":
            dish = self._recipe(args)
            if dish is None:
                return self._end("Error: unknown recipe. The book holds: " + ", ".join(self.order) + ".", True)
            servings = as_number(args.get("servings"))
            if servings is None or servings != int(servings) or servings < 1 or servings > 1000:
                return self._end("Error: servings must be a whole number from 1 to 1000.", True)
            servings = int(servings)
            if [dish, servings] not in self.scaled:
                self.scaled.append([dish, servings])
            factor = Fraction(servings, self.book[dish]["servings"])
            return self._end(dish + " scaled to " + str(servings) + " servings: " + self._card(dish, factor) + ".", False)
        if name == "convert_unit":
            amount = as_number(args.get("amount"))
            src = args.get("from_unit")
            dst = args.get("to_unit")
            src = ALIASES.get(src.strip().lower()) if isinstance(src, str) else None
            dst = ALIASES.get(dst.strip().lower()) if isinstance(dst, str) else None
            if amount is None:
                return self._end("Error: amount must be a number.", True)
            if src is None or dst is None:
                return self._end("Error: unknown unit; use cup, tbsp, tsp, ml, g, oz or lb.", True)
            if family(src) != family(dst):
                return self._end("Error: cannot convert between volume (cup, tbsp, tsp, ml) and mass (g, oz, lb).", True)
            value = Fraction(amount) * unit_size(src) / unit_size(dst)
            return self._end(show(Fraction(amount)) + " " + src + " = " + show(value) + " " + dst + ".", False)
        if name == "submit":
            amount = as_number(args.get("amount"))
            if amount is None:
                return self._end("Error: amount must be a number.", True)
            self.finished = True
            truth = float(self.answer)
            if abs(amount - truth) <= 0.01 * abs(truth) + 1e-9:
                return ("Correct: you need " + show(self.answer) + " " + self.target_unit + " of " + self.ingredient
                        + ". Task complete.", 1.0, True, False, self._info(False))
            return ("Submitted " + show(Fraction(amount)) + " " + self.target_unit + ", which is not the amount of "
                    + self.ingredient + " needed. Task failed.", 0.0, True, False, self._info(False))
        return self._end("Error: unknown tool; use get_recipe, scale_recipe, convert_unit or submit.", True)

    def hint(self):
        parts = []
        for dish, servings in self.needed:
            base = self.book[dish]["servings"]
            parts.append("the " + dish + " card serves " + str(base) + ", so multiply its amounts by "
                         + str(servings) + "/" + str(base))
        text = "Hint: " + "; ".join(parts) + ". "
        for dish, servings in self.needed:
            unit = self._line(dish)[2]
            if unit != self.target_unit:
                factor = unit_size(unit) / unit_size(self.target_unit)
                # when the answer is exactly one unit, "1 oz = 28.35 g" would state it: show ten units
                count = 10 if show(factor) == show(self.answer) else 1
                text += ("The " + dish + " card lists " + self.ingredient + " in " + unit + "; " + str(count) + " "
                         + unit + " = " + show(count * factor) + " " + self.target_unit + ". ")
            else:
                text += "The " + dish + " card already lists " + self.ingredient + " in " + self.target_unit + ". "
        text = text.strip()
        if len(self.needed) > 1:
            text += " Convert each amount to " + self.target_unit + " before adding them."
        return text

    def oracle(self):
        for dish, servings in self.needed:
            if [dish, servings] not in self.scaled:
                return json.dumps({"name": "scale_recipe", "arguments": {"recipe": dish, "servings": servings}})
        return json.dumps({"name": "submit", "arguments": {"amount": float(f"{float(self.answer):.6g}")}})
