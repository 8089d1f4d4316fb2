import json
import random

N_ORDERS = 2
PRODUCTS = ["lamp", "desk", "chair", "kettle", "shelf", "mirror", "rug", "clock", "sofa", "fan"]
STATES = ["shipped", "packed", "delivered", "delayed"]
TOOLS = [{"type": "function", "function": {
    "name": "get_status", "description": "Look up the delivery status of one order.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}]


class Env:
    """Answer a customer with one tool call: the observation lists N_ORDERS orders (one more on harder seeds) as id and product, and the customer asks about one product; calling get_status with that product's order id (copied from the list; the one listed id among the call's argument values counts) pays 1.0 on the first call and 0.5 on the second, a call for another order is answered with that order's product. The hint says where in the list the order is, then asks again."""

    name = "OrderStatusLookup"
    setting = "tool_use"
    max_turns = 2
    tools = TOOLS

    def __init__(self):
        self.orders = {}
        self.asked = ""
        self.turn = 0
        self.done = False

    def reset(self, seed):
        rng = random.Random(seed)
        n = N_ORDERS + rng.randint(0, 1)
        products = rng.sample(PRODUCTS, n)
        self.orders = {"A" + str(k): p for p, k in zip(products, rng.sample(range(1000, 10000), n))}
        self.asked = rng.choice(products)
        self.turn = 0
        self.done = False
        listing = "\n".join(oid + ": " + p for oid, p in self.orders.items())
        obs = ("Orders:\n" + listing + "\nCustomer: where is my " + self.asked
               + "? Call get_status with the order id of the " + self.asked + ".")
        return obs, {"difficulty": n, "orders": n}

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"correct": False}
        self.turn += 1
        try:
            values = [str(v).strip() for v in json.loads(action).get("arguments", {}).values()]
        except (ValueError, AttributeError):
            values = []
        named = [v for v in values if v in self.orders]
        oid = named[0] if len(named) == 1 else ""
        correct = self.orders.get(oid) == self.asked
        reward = [1.0, 0.5][self.turn - 1] if correct else 0.0
        truncated = not correct and self.turn >= self.max_turns
        self.done = correct or truncated
        if correct:
            obs = "Order " + oid + " (" + self.asked + "): shipped. Task done."
        elif oid in self.orders:
            obs = "Order " + oid + " is the " + self.orders[oid] + ", not the " + self.asked + "."
        else:
            obs = "Error: call get_status with an order id from the list."
        return obs, reward, correct, truncated, {"correct": correct}

    def _target(self):
        return [oid for oid, p in self.orders.items() if p == self.asked][0]

    def hint(self):
        place = list(self.orders.values()).index(self.asked)
        where = ["first", "second", "third", "fourth", "fifth"][place]
        return "The " + self.asked + " is the " + where + " order in the list. Call get_status with its order id."

    def oracle(self):
        return json.dumps({"name": "get_status", "arguments": {"order_id": self._target()}})
