import json
import random

PRODUCTS = ["blue mug", "desk lamp", "usb cable", "notebook", "water bottle", "phone stand", "wool scarf",
            "yoga mat", "tea kettle", "bike light", "backpack", "wall clock", "cutting board", "headphones",
            "plant pot", "umbrella"]
WAREHOUSES = ["north", "south", "east", "west"]


def as_whole_number(value):
    """A JSON number that is a whole number, as int; None otherwise (bools are rejected)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and -1e15 < value < 1e15 and value == int(value):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) < 9:
        return int(value.strip())
    return None


class Env:
    """Fulfil a seeded purchase request against a small inventory and order API: check_stock(product) reveals a product's SKU, price and per-warehouse stock, place_order(sku, quantity, warehouse) returns only an order id (orders larger than that warehouse's stock are refused), get_order_status(order_id) reveals the tracking number, cancel_order(order_id) undoes a mistake, and submit(tracking_numbers) checks the result; every call is a JSON tool call such as {"name": "check_stock", "arguments": {"product": "desk lamp"}}; harder seeds add choosing the one warehouse that can fill a whole line, a substitute product when the first choice cannot be filled, and two order lines, so the agent must chain SKUs, order ids and tracking numbers across calls, and submit pays 1.0 once when exactly the right orders exist and all their tracking numbers are reported."""

    name = "InventoryOrderFulfilment"
    setting = "tool_use"
    max_turns = 20
    tools = [
        {"type": "function", "function": {
            "name": "check_stock",
            "description": "Look up a product by name: its SKU, unit price and units in stock at each warehouse.",
            "parameters": {"type": "object",
                           "properties": {"product": {"type": "string", "description": "Product name, e.g. desk lamp."}},
                           "required": ["product"]}}},
        {"type": "function", "function": {
            "name": "place_order",
            "description": "Order units of one SKU shipped from one warehouse; refused if that warehouse has too few units. Returns the order id.",
            "parameters": {"type": "object",
                           "properties": {"sku": {"type": "string"},
                                          "quantity": {"type": "integer", "minimum": 1},
                                          "warehouse": {"type": "string"}},
                           "required": ["sku", "quantity", "warehouse"]}}},
        {"type": "function", "function": {
            "name": "get_order_status",
            "description": "Status of an order, including its tracking number.",
            "parameters": {"type": "object",
                           "properties": {"order_id": {"type": "string"}},
                           "required": ["order_id"]}}},
        {"type": "function", "function": {
            "name": "cancel_order",
            "description": "Cancel an order and return its units to stock.",
            "parameters": {"type": "object",
                           "properties": {"order_id": {"type": "string"}},
                           "required": ["order_id"]}}},
        {"type": "function", "function": {
            "name": "submit",
            "description": "Report the tracking numbers of the orders that fulfil the request; ends the episode when correct.",
            "parameters": {"type": "object",
                           "properties": {"tracking_numbers": {"type": "array", "items": {"type": "string"}}},
                           "required": ["tracking_numbers"]}}},
    ]

    def __init__(self):
        self.level = 0
        self.turn = 0
        self.finished = False
        self.catalog = {}
        self.names = []
        self.warehouses = []
        self.lines = []
        self.required = []
        self.orders = {}
        self.checked = []
        self.status_seen = []
        self.next_order = 1000

    def _sku(self, rng, used):
        s = "SKU-" + str(rng.randint(1000, 9999))
        while s in used:
            s = "SKU-" + str(rng.randint(1000, 9999))
        used.append(s)
        return s

    def _stock(self, rng, qty, fillable, spread):
        """Per-warehouse stock for a line of qty units: exactly one warehouse can fill it when fillable, none otherwise."""
        stock = {}
        for w in self.warehouses:
            stock[w] = 0
        if spread:
            for w in self.warehouses:
                stock[w] = rng.randint(0, max(0, qty - 1))
        if fillable:
            stock[rng.choice(self.warehouses)] = qty + rng.randint(0, 6)
        elif not spread:
            stock[rng.choice(self.warehouses)] = rng.randint(0, max(0, qty - 1))
        return stock

    def reset(self, seed):
        rng = random.Random(seed)
        self.level = rng.randint(0, 3)
        self.turn = 0
        self.finished = False
        self.orders = {}
        self.checked = []
        self.status_seen = []
        self.next_order = rng.randint(1000, 8999)
        self.warehouses = sorted(rng.sample(WAREHOUSES, 2 if self.level == 0 else 3))
        self.names = rng.sample(PRODUCTS, 6)
        self.catalog = {}
        used = []
        for nm in self.names:
            self.catalog[nm] = {"sku": self._sku(rng, used), "price": rng.randint(3, 60),
                                "stock": self._stock(rng, rng.randint(1, 9), rng.random() < 0.7, True)}
        self.lines = []
        # line = [primary, substitute or "", quantity]
        if self.level == 0:
            self.lines.append([self.names[0], "", rng.randint(1, 5)])
        elif self.level == 1:
            self.lines.append([self.names[0], "", rng.randint(6, 15)])
        elif self.level == 2:
            self.lines.append([self.names[0], self.names[1], rng.randint(4, 12)])
        else:
            self.lines.append([self.names[0], "", rng.randint(6, 15)])
            self.lines.append([self.names[1], self.names[2], rng.randint(4, 12)])
        self.required = []
        for line in self.lines:
            qty = line[2]
            prim = self.catalog[line[0]]
            if line[1]:
                prim_ok = rng.random() < 0.45
                prim["stock"] = self._stock(rng, qty, prim_ok, self.level >= 2)
                sub = self.catalog[line[1]]
                sub["stock"] = self._stock(rng, qty, True, True)
                chosen = line[0] if prim_ok else line[1]
            else:
                prim["stock"] = self._stock(rng, qty, True, self.level >= 1)
                chosen = line[0]
            self.required.append([chosen, qty])
        reqs = []
        for line in self.lines:
            text = str(line[2]) + " x " + line[0]
            if line[1]:
                text += (" (if no single warehouse has " + str(line[2]) + " units of " + line[0]
                         + ", order " + str(line[2]) + " x " + line[1] + " instead)")
            reqs.append(text)
        obs = ("You run fulfilment for a shop with warehouses " + ", ".join(self.warehouses) + ". Catalog: "
               + ", ".join(sorted(self.names)) + " (SKUs, prices and stock are hidden until you call check_stock).\n"
               + "Task: place orders for " + " and ".join(reqs) + ". Each item must ship as ONE order from a single "
               + "warehouse that has enough units. Then report the tracking numbers of your orders with submit(tracking_numbers).\n"
               + "Tools: check_stock(product), place_order(sku, quantity, warehouse), get_order_status(order_id), "
               + "cancel_order(order_id), submit(tracking_numbers). Reply with one JSON tool call, e.g. "
               + "{\"name\": \"check_stock\", \"arguments\": {\"product\": \"" + self.names[3] + "\"}}. You have "
               + str(self.max_turns) + " calls.")
        info = {"difficulty": self.level, "lines": len(self.lines),
                "substitutes": len([x for x in self.lines if x[1]])}
        return obs, info

    def _info(self, error):
        return {"difficulty": self.level, "turn": self.turn, "error": error,
                "active_orders": len(self._active()), "lines": len(self.lines)}

    def _reply(self, obs, error):
        truncated = self.turn >= self.max_turns
        if truncated:
            self.finished = True
            obs = obs + " Out of calls."
        return obs, 0.0, False, truncated, self._info(error)

    def _active(self):
        return [o for o in sorted(self.orders) if self.orders[o]["active"]]

    def _product_by_sku(self, sku):
        for nm in self.names:
            if self.catalog[nm]["sku"] == sku:
                return nm
        return ""

    def _match(self):
        """For each required line, the active order id that fulfils it ('' if none); plus the unmatched active orders."""
        free = self._active()
        matched = []
        for req in self.required:
            sku = self.catalog[req[0]]["sku"]
            hit = ""
            for oid in free:
                o = self.orders[oid]
                if o["sku"] == sku and o["qty"] == req[1]:
                    hit = oid
                    break
            if hit:
                free.remove(hit)
            matched.append(hit)
        return matched, free

    def _order_id(self, value):
        if isinstance(value, int) and not isinstance(value, bool):
            value = "ORD-" + str(value)
        if not isinstance(value, str):
            return None
        v = value.strip().upper()
        if v.isdigit():
            v = "ORD-" + v
        return v if v in self.orders else None

    def step(self, action):
        if self.finished:
            return "The episode is over.", 0.0, True, False, self._info(False)
        self.turn += 1
        try:
            call = json.loads(str(action))
        except (ValueError, RecursionError):
            return self._reply("Error: the action is not valid JSON; send {\"name\": ..., \"arguments\": {...}}.", True)
        if not isinstance(call, dict):
            return self._reply("Error: the tool call must be a JSON object with name and arguments.", True)
        name = call.get("name")
        args = call.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except (ValueError, RecursionError):
                args = None
        if not isinstance(args, dict):
            return self._reply("Error: arguments must be a JSON object.", True)
        if name == "check_stock":
            prod = args.get("product")
            prod = prod.strip().lower() if isinstance(prod, str) else None
            if prod not in self.catalog:
                bysku = self._product_by_sku(prod.upper()) if prod else ""
                if not bysku:
                    return self._reply("Error: unknown product. Catalog: " + ", ".join(sorted(self.names)) + ".", True)
                prod = bysku
            if prod not in self.checked:
                self.checked.append(prod)
            item = self.catalog[prod]
            parts = [w + " " + str(item["stock"][w]) for w in self.warehouses]
            return self._reply(prod + ": " + item["sku"] + ", $" + str(item["price"]) + " each; in stock: "
                               + ", ".join(parts) + ".", False)
        if name == "place_order":
            sku = args.get("sku")
            sku = sku.strip().upper() if isinstance(sku, str) else None
            qty = as_whole_number(args.get("quantity"))
            wh = args.get("warehouse")
            wh = wh.strip().lower() if isinstance(wh, str) else None
            prod = self._product_by_sku(sku) if sku else ""
            if not prod:
                if sku and sku.lower() in self.catalog:
                    return self._reply("Error: place_order needs the SKU (like SKU-1234), not the product name; use check_stock.", True)
                return self._reply("Error: unknown SKU; check_stock shows a product's SKU.", True)
            if qty is None or qty <= 0:
                return self._reply("Error: quantity must be a positive whole number.", True)
            if wh not in self.warehouses:
                return self._reply("Error: unknown warehouse; warehouses: " + ", ".join(self.warehouses) + ".", True)
            have = self.catalog[prod]["stock"][wh]
            if qty > have:
                return self._reply("Error: " + wh + " has only " + str(have) + " units of " + sku + "; order refused.", True)
            self.catalog[prod]["stock"][wh] = have - qty
            oid = "ORD-" + str(self.next_order)
            self.next_order += 7
            track = "TRK-" + str((self.next_order * 7919 + qty * 131) % 900000 + 100000)
            self.orders[oid] = {"sku": sku, "qty": qty, "wh": wh, "tracking": track, "active": True}
            return self._reply("Order " + oid + " placed: " + str(qty) + " x " + sku + " from " + wh + ".", False)
        if name == "get_order_status":
            oid = self._order_id(args.get("order_id"))
            if oid is None:
                return self._reply("Error: no such order; order ids look like ORD-1234.", True)
            o = self.orders[oid]
            if oid not in self.status_seen:
                self.status_seen.append(oid)
            if not o["active"]:
                return self._reply(oid + ": cancelled.", False)
            return self._reply(oid + ": packed, " + str(o["qty"]) + " x " + o["sku"] + " from " + o["wh"]
                               + ", tracking number " + o["tracking"] + ".", False)
        if name == "cancel_order":
            oid = self._order_id(args.get("order_id"))
            if oid is None:
                return self._reply("Error: no such order; order ids look like ORD-1234.", True)
            o = self.orders[oid]
            if not o["active"]:
                return self._reply("Error: " + oid + " is already cancelled.", True)
            o["active"] = False
            prod = self._product_by_sku(o["sku"])
            self.catalog[prod]["stock"][o["wh"]] += o["qty"]
            return self._reply("Cancelled " + oid + "; " + str(o["qty"]) + " units returned to " + o["wh"] + ".", False)
        if name == "submit":
            nums = args.get("tracking_numbers")
            if isinstance(nums, str):
                nums = [x for x in nums.replace(",", " ").split() if x]
            if not isinstance(nums, list) or not all(isinstance(x, str) for x in nums):
                return self._reply("Error: tracking_numbers must be a list of strings.", True)
            nums = sorted(x.strip().upper() for x in nums)
            matched, extra = self._match()
            problems = []
            if "" in matched:
                problems.append(str(matched.count("")) + " requested item(s) have no matching order (right product and quantity)")
            if extra:
                problems.append("there are active orders that are not part of the request")
            if not problems:
                want = sorted(self.orders[o]["tracking"] for o in matched)
                if nums != want:
                    problems.append("the tracking numbers do not match your orders")
            if problems:
                return self._reply("Check failed: " + "; ".join(problems) + ". Fix it and submit again.", False)
            self.finished = True
            return ("Correct: the request is fulfilled and tracked. Task complete.", 1.0, True, False, self._info(False))
        return self._reply("Error: unknown tool; use check_stock, place_order, get_order_status, cancel_order or submit.", True)

    def hint(self):
        text = ("place_order wants the SKU from check_stock and one warehouse that holds the full quantity; "
                "the tracking number only appears in get_order_status.")
        subs = [x for x in self.lines if x[1]]
        if subs:
            line = subs[0]
            text += (" For the item with a fallback you will need to order " + line[0 if self.required[-1][0] == line[0] else 1]
                     + ".")
        else:
            text += " Order " + self.required[0][0] + " as a single order."
        return text

    def _call(self, name, args):
        return json.dumps({"name": name, "arguments": args})

    def oracle(self):
        matched, extra = self._match()
        if extra:
            return self._call("cancel_order", {"order_id": extra[0]})
        for i, line in enumerate(self.lines):
            if matched[i]:
                continue
            if line[0] not in self.checked:
                return self._call("check_stock", {"product": line[0]})
            chosen = self.required[i][0]
            if chosen not in self.checked:
                return self._call("check_stock", {"product": chosen})
            item = self.catalog[chosen]
            qty = self.required[i][1]
            wh = ""
            for w in self.warehouses:
                if item["stock"][w] >= qty:
                    wh = w
                    break
            return self._call("place_order", {"sku": item["sku"], "quantity": qty, "warehouse": wh})
        for oid in matched:
            if oid not in self.status_seen:
                return self._call("get_order_status", {"order_id": oid})
        return self._call("submit", {"tracking_numbers": sorted(self.orders[o]["tracking"] for o in matched)})
