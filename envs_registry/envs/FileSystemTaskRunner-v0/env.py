import json
import random

DIR_WORDS = ["notes", "drafts", "reports", "projects", "work", "personal", "backup", "shared", "docs2", "plans"]
ARCHIVE_WORDS = ["archive", "old", "done", "storage", "vault", "history"]
FILE_WORDS = ["todo", "summary", "plan", "ideas", "log", "memo", "agenda", "checklist", "draft", "status"]
PHRASES = ["buy milk", "call the dentist", "renew passport", "fix the printer", "water the plants",
           "book a venue", "send the invoice", "update the budget", "review the contract", "order new chairs"]
PROJECTS = ["falcon", "orchid", "granite", "nebula", "willow", "cobalt", "maple", "tundra", "harbor", "quartz"]
LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"


def make_code(rng):
    return rng.choice(LETTERS) + rng.choice(LETTERS) + "-" + str(rng.randint(1000, 9999))


def norm_path(value):
    """Normalise a path argument to 'a/b/c' form; None when it is not a usable path."""
    if not isinstance(value, str):
        return None
    p = value.strip().replace("\\", "/")
    while p.startswith("./"):
        p = p[2:]
    parts = [x for x in p.split("/") if x not in ("", ".")]
    for part in parts:
        if part == ".." or len(part) > 40:
            return None
    if len(parts) > 8:
        return None
    return "/".join(parts)


def parent_of(path):
    if "/" not in path:
        return ""
    return path.rsplit("/", 1)[0]


def base_of(path):
    return path.rsplit("/", 1)[-1]


class Env:
    """Carry out a seeded file-management task in a small in-memory file system through a stateful API: mkdir(path) (parents must already exist), write_file(path, content), read_file(path), list_dir(path), move(src, dst) and submit(), each sent as a JSON tool call like {"name": "mkdir", "arguments": {"path": "notes"}}; tasks grow with the seeded difficulty from creating one file to listing a folder, reading files to find the one about a project, copying its code into a new nested file and archiving the source, so the agent must plan several calls in dependency order, take arguments from earlier observations, recover from error observations, and only then call submit, which pays 1.0 once when the final file system satisfies every requirement."""

    name = "FileSystemTaskRunner"
    setting = "tool_use"
    max_turns = 20
    tools = [
        {"type": "function", "function": {
            "name": "mkdir",
            "description": "Create one directory; its parent directory must already exist (no -p).",
            "parameters": {"type": "object",
                           "properties": {"path": {"type": "string", "description": "Directory path, e.g. notes or notes/2024."}},
                           "required": ["path"]}}},
        {"type": "function", "function": {
            "name": "write_file",
            "description": "Create or overwrite a file with the given text; its directory must already exist.",
            "parameters": {"type": "object",
                           "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                           "required": ["path", "content"]}}},
        {"type": "function", "function": {
            "name": "read_file",
            "description": "Return the text of a file.",
            "parameters": {"type": "object",
                           "properties": {"path": {"type": "string"}},
                           "required": ["path"]}}},
        {"type": "function", "function": {
            "name": "list_dir",
            "description": "List the entries of a directory (directories end with /). Use \"\" or \"/\" for the root.",
            "parameters": {"type": "object",
                           "properties": {"path": {"type": "string"}},
                           "required": ["path"]}}},
        {"type": "function", "function": {
            "name": "move",
            "description": "Move a file or directory. If dst is an existing directory the item is moved into it, otherwise it is renamed to dst (whose parent must exist).",
            "parameters": {"type": "object",
                           "properties": {"src": {"type": "string"}, "dst": {"type": "string"}},
                           "required": ["src", "dst"]}}},
        {"type": "function", "function": {
            "name": "submit",
            "description": "Ask for the task to be checked; ends the episode when every requirement holds, otherwise reports what is still wrong.",
            "parameters": {"type": "object", "properties": {}, "required": []}}},
    ]

    def __init__(self):
        self.dirs = []
        self.files = {}
        self.level = 0
        self.turn = 0
        self.finished = False
        self.plan = []
        self.require_files = {}
        self.require_absent = []
        self.source = ""
        self.listed = False
        self.read_paths = []
        self.content = ""
        self.target = ""
        self.final = ""
        self.folder = ""
        self.archive = ""
        self.submits = 0

    def reset(self, seed):
        rng = random.Random(seed)
        self.level = rng.randint(0, 3)
        self.turn = 0
        self.finished = False
        self.submits = 0
        self.listed = False
        self.read_paths = []
        self.dirs = ["docs"]
        self.files = {"docs/readme.txt": "Welcome to the workspace."}
        self.require_files = {}
        self.require_absent = []
        self.source = ""
        self.folder = ""
        words = rng.sample(DIR_WORDS, 3)
        d1 = words[0]
        d_sub = words[1]
        arch = rng.choice(ARCHIVE_WORDS)
        fname = rng.choice(FILE_WORDS) + ".txt"
        if self.level == 0:
            self.content = rng.choice(PHRASES) + " by " + str(rng.randint(2, 28)) + " May"
            self.target = d1 + "/" + fname
            self.final = self.target
            self.require_files = {self.target: self.content}
            task = "create the file " + self.target + " containing exactly: " + self.content
        elif self.level == 1:
            self.content = rng.choice(PHRASES) + " (ticket " + str(rng.randint(100, 999)) + ")"
            self.target = d1 + "/" + fname
            self.final = arch + "/" + fname
            self.require_files = {self.final: self.content}
            self.require_absent = [self.target]
            task = ("create the file " + self.target + " containing exactly: " + self.content
                    + " ; then move it into the folder " + arch + "/ (keeping its name)")
        elif self.level == 2:
            code = make_code(rng)
            self.content = code
            self.folder = "inbox"
            src_name = rng.choice(["access", "credentials", "badge", "keycard"]) + ".txt"
            self.source = "inbox/" + src_name
            self.dirs.append("inbox")
            self.files[self.source] = ("Access details\nissued: " + str(rng.randint(2019, 2025))
                                       + "\ncode: " + code)
            self.target = d1 + "/" + fname
            self.final = self.target
            self.require_files = {self.target: code, arch + "/" + src_name: self.files[self.source]}
            self.require_absent = [self.source]
            task = ("the file " + self.source + " holds an access code on its 'code:' line. Create "
                    + self.target + " containing exactly that code (nothing else), then move "
                    + self.source + " into the folder " + arch + "/ (keeping its name)")
        else:
            projects = rng.sample(PROJECTS, rng.randint(3, 4))
            wanted = projects[0]
            order = list(projects)
            rng.shuffle(order)
            self.dirs.append("inbox")
            self.folder = "inbox"
            used = []
            for proj in order:
                nm = "note_" + "".join(rng.choice("abcdefghkmnpqrstuvwxyz") for _ in range(3)) + ".txt"
                while nm in used:
                    nm = "note_" + "".join(rng.choice("abcdefghkmnpqrstuvwxyz") for _ in range(3)) + ".txt"
                used.append(nm)
                code = make_code(rng)
                self.files["inbox/" + nm] = "project: " + proj + "\ncode: " + code
                if proj == wanted:
                    self.source = "inbox/" + nm
                    self.content = code
            self.target = d1 + "/" + d_sub + "/" + fname
            self.final = self.target
            moved = arch + "/" + wanted + "/" + base_of(self.source)
            self.require_files = {self.target: self.content, moved: self.files[self.source]}
            self.require_absent = [self.source]
            task = ("one file in inbox/ is about project " + wanted + " (its 'project:' line). Create "
                    + self.target + " containing exactly the code from that file's 'code:' line, then move that "
                    + "inbox file into the folder " + arch + "/" + wanted + "/ (keeping its name)")
        self.archive = arch
        root = sorted([d for d in self.dirs if "/" not in d])
        obs = ("You work in a small file system. Top-level folders: " + ", ".join(d + "/" for d in root) + ".\n"
               + "Task: " + task + ". When done, call submit().\n"
               + "Tools: mkdir(path) (the parent must exist), write_file(path, content), read_file(path), "
               + "list_dir(path), move(src, dst), submit(). Reply with one JSON tool call, e.g. "
               + "{\"name\": \"list_dir\", \"arguments\": {\"path\": \"docs\"}}. You have "
               + str(self.max_turns) + " calls.")
        info = {"difficulty": self.level, "target": self.final,
                "requirements": len(self.require_files) + len(self.require_absent)}
        return obs, info

    def _info(self, error):
        return {"difficulty": self.level, "turn": self.turn, "error": error,
                "requirements_met": self._met_count(),
                "requirements": len(self.require_files) + len(self.require_absent)}

    def _met_count(self):
        n = 0
        for path in sorted(self.require_files):
            if path in self.files and self.files[path].strip() == self.require_files[path].strip():
                n += 1
        for path in self.require_absent:
            if path not in self.files:
                n += 1
        return n

    def _reply(self, obs, error):
        truncated = self.turn >= self.max_turns
        if truncated:
            self.finished = True
            obs = obs + " Out of calls."
        return obs, 0.0, False, truncated, self._info(error)

    def _is_dir(self, path):
        return path == "" or path in self.dirs

    def _entries(self, path):
        out = []
        prefix = path + "/" if path else ""
        for d in self.dirs:
            if d.startswith(prefix) and "/" not in d[len(prefix):]:
                out.append(d[len(prefix):] + "/")
        for f in self.files:
            if f.startswith(prefix) and "/" not in f[len(prefix):]:
                out.append(f[len(prefix):])
        return sorted(out)

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
        if args is None and name == "submit":
            args = {}
        if not isinstance(args, dict):
            return self._reply("Error: arguments must be a JSON object.", True)
        if name == "mkdir":
            path = norm_path(args.get("path"))
            if not path:
                return self._reply("Error: mkdir needs a non-empty relative path without '..'.", True)
            if path in self.dirs or path in self.files:
                return self._reply("Error: " + path + " already exists.", True)
            par = parent_of(path)
            if not self._is_dir(par):
                return self._reply("Error: parent directory " + par + "/ does not exist (mkdir creates one level at a time).", True)
            self.dirs.append(path)
            self.dirs.sort()
            return self._reply("Created directory " + path + "/.", False)
        if name == "write_file":
            path = norm_path(args.get("path"))
            content = args.get("content")
            if not path:
                return self._reply("Error: write_file needs a file path.", True)
            if not isinstance(content, str):
                return self._reply("Error: content must be a string.", True)
            if len(content) > 500:
                return self._reply("Error: content is too long (500 characters at most).", True)
            if path in self.dirs:
                return self._reply("Error: " + path + " is a directory.", True)
            par = parent_of(path)
            if not self._is_dir(par):
                return self._reply("Error: directory " + par + "/ does not exist; create it with mkdir first.", True)
            existed = path in self.files
            self.files[path] = content
            return self._reply(("Overwrote " if existed else "Wrote ") + path + " (" + str(len(content)) + " characters).", False)
        if name == "read_file":
            path = norm_path(args.get("path"))
            if not path:
                return self._reply("Error: read_file needs a file path.", True)
            if path in self.dirs:
                return self._reply("Error: " + path + " is a directory; use list_dir.", True)
            if path not in self.files:
                return self._reply("Error: no such file: " + path + ".", True)
            if path not in self.read_paths:
                self.read_paths.append(path)
            return self._reply("Contents of " + path + ":\n" + self.files[path], False)
        if name == "list_dir":
            path = norm_path(args.get("path", ""))
            if path is None:
                return self._reply("Error: list_dir needs a directory path (\"\" for the root).", True)
            if not self._is_dir(path):
                return self._reply("Error: no such directory: " + path + ".", True)
            if path == self.folder:
                self.listed = True
            entries = self._entries(path)
            shown = path + "/" if path else "/"
            if not entries:
                return self._reply(shown + " is empty.", False)
            return self._reply(shown + " contains: " + ", ".join(entries), False)
        if name == "move":
            src = norm_path(args.get("src"))
            dst = norm_path(args.get("dst"))
            if not src or dst is None:
                return self._reply("Error: move needs src and dst paths.", True)
            if src not in self.files and src not in self.dirs:
                return self._reply("Error: no such file or directory: " + src + ".", True)
            if self._is_dir(dst):
                dst = (dst + "/" if dst else "") + base_of(src)
            if dst in self.files or dst in self.dirs:
                return self._reply("Error: " + dst + " already exists.", True)
            if not self._is_dir(parent_of(dst)):
                return self._reply("Error: directory " + parent_of(dst) + "/ does not exist; create it with mkdir first.", True)
            if src in self.files:
                self.files[dst] = self.files.pop(src)
            else:
                if dst == src or dst.startswith(src + "/"):
                    return self._reply("Error: cannot move a directory into itself.", True)
                new_dirs = []
                for d in self.dirs:
                    if d == src or d.startswith(src + "/"):
                        new_dirs.append(dst + d[len(src):])
                    else:
                        new_dirs.append(d)
                self.dirs = sorted(new_dirs)
                new_files = {}
                for f in sorted(self.files):
                    if f.startswith(src + "/"):
                        new_files[dst + f[len(src):]] = self.files[f]
                    else:
                        new_files[f] = self.files[f]
                self.files = new_files
            return self._reply("Moved " + src + " to " + dst + ".", False)
        if name == "submit":
            self.submits += 1
            problems = []
            for path in sorted(self.require_files):
                if path not in self.files:
                    problems.append("a required file is missing")
                elif self.files[path].strip() != self.require_files[path].strip():
                    problems.append(path + " does not have the required content")
            for path in self.require_absent:
                if path in self.files:
                    problems.append(path + " should no longer be there")
            if problems:
                return self._reply("Check failed (" + str(self._met_count()) + " of "
                                   + str(len(self.require_files) + len(self.require_absent))
                                   + " requirements met): " + "; ".join(problems) + ". Keep working and submit again.", False)
            self.finished = True
            return ("Check passed: every requirement holds. Task complete.", 1.0, True, False, self._info(False))
        return self._reply("Error: unknown tool; use mkdir, write_file, read_file, list_dir, move or submit.", True)

    def hint(self):
        parts = ["mkdir creates one level at a time, so make each parent folder first; write_file and move need their target folder to exist."]
        if self.level == 0:
            parts.append("Two calls before submit: mkdir " + parent_of(self.target) + ", then write_file.")
        elif self.level == 1:
            parts.append("Write the file first, create " + self.archive + "/ , then move " + self.target + " into it.")
        elif self.level == 2:
            parts.append("read_file " + self.source + " to learn the code; write only the code itself, without the 'code:' label.")
        else:
            parts.append("list_dir inbox first; the file you need is " + base_of(self.source)
                         + "; write only the code, and create " + self.archive + "/ before " + self.archive + "/<project>/.")
        return " ".join(parts)

    def _call(self, name, args):
        return json.dumps({"name": name, "arguments": args})

    def oracle(self):
        if self.level == 3 and not self.listed:
            return self._call("list_dir", {"path": self.folder})
        if self.source and self.source not in self.read_paths and self.source in self.files:
            return self._call("read_file", {"path": self.source})
        # the file to create must exist with the right content (unless it has already been moved on)
        need_write = True
        for path in sorted(self.require_files):
            if path in self.files and self.files[path].strip() == self.content.strip():
                need_write = False
        if self.level == 1 and self.target in self.files and self.files[self.target].strip() == self.content.strip():
            need_write = False
        if need_write:
            par = parent_of(self.target)
            missing = self._first_missing(par)
            if missing:
                return self._call("mkdir", {"path": missing})
            return self._call("write_file", {"path": self.target, "content": self.content})
        # the item to move
        mover = ""
        if self.level == 1 and self.target in self.files:
            mover = self.target
        elif self.level >= 2 and self.source in self.files:
            mover = self.source
        if mover:
            dest = self.archive if self.level <= 2 else self.archive + "/" + self.final_project_dir()
            missing = self._first_missing(dest)
            if missing:
                return self._call("mkdir", {"path": missing})
            return self._call("move", {"src": mover, "dst": dest + "/"})
        return self._call("submit", {})

    def final_project_dir(self):
        for path in sorted(self.require_files):
            if path.startswith(self.archive + "/"):
                return parent_of(path)[len(self.archive) + 1:]
        return ""

    def _first_missing(self, path):
        parts = path.split("/") if path else []
        cur = ""
        for part in parts:
            cur = part if not cur else cur + "/" + part
            if cur not in self.dirs:
                return cur
        return ""
