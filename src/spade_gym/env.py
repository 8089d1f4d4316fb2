"""``SandboxedEnv``: a ``gymnasium.Env`` over an environment program running in the sandbox.

Observations and actions are text (:class:`~spade_gym.spaces.UnicodeText`); the program runs in a
locked-down worker (:mod:`spade_gym.sandbox`) that ``close`` always reaps.
"""

from __future__ import annotations

import contextlib
import os
import unicodedata
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym

from spade_gym.errors import Category, ContractError, ResourceLimitExceeded, SandboxError
from spade_gym.program import RETURN_TOLERANCE, EnvProgram
from spade_gym.sandbox import Budget, SandboxClient, SandboxConfig
from spade_gym.sandbox.protocol import RESERVED_INFO_KEY
from spade_gym.spaces import UnicodeText

__all__ = ["SandboxedEnv", "escape_text"]

ErrorMode = Literal["truncate", "raise"]


def escape_text(text: str, limit: int | None = None) -> str:
    """Make untrusted text safe to print: control and format characters (ANSI escapes, NUL, bidi
    overrides) become ``\\xNN`` / ``\\uNNNN`` escapes, newlines and tabs stay; ``limit``: keep at
    most this many characters, marking the cut."""
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"... [{len(text) - limit} more characters]"
    return "".join(
        ch if ch in "\n\t" or unicodedata.category(ch)[0] != "C" else ch.encode("unicode_escape").decode("ascii")
        for ch in text
    )


def _as_program(program: EnvProgram | str | os.PathLike[str]) -> EnvProgram:
    if isinstance(program, EnvProgram):
        return program
    if isinstance(program, os.PathLike) or ("\n" not in program and Path(program).is_file()):
        return EnvProgram.from_file(program)
    if "\n" not in program:
        raise FileNotFoundError(f"no environment program file at {program!r} (pass a path or the source text)")
    return EnvProgram(program)


class SandboxedEnv(gym.Env[str, str]):
    """A Gymnasium environment whose dynamics are an environment program run in the sandbox.

    Args:
        program: an :class:`EnvProgram`, a path to a program file, or source text (a str with a
            newline), so it works as a ``gymnasium.make`` keyword.
        config: sandbox limits (:class:`SandboxConfig`).
        on_error: when the program fails mid-episode (including a return outside [0, 1],
            ``INVALID_REWARD``), ``"truncate"`` ends the episode with ``truncated=True``, reward 0,
            the previous observation and ``info["sandbox_error"]`` (``{"type", "category",
            "message", "traceback"}``); ``"raise"`` raises the :class:`~spade_gym.errors.SandboxError`.
            ``reset``, ``hint`` and ``oracle`` always raise.
        render_mode: ``None``, ``"ansi"`` (``render()`` returns the escaped observation) or ``"human"``.

    Attributes:
        name, setting, tools, description: what the program declares.
        max_turns: what the program declares, capped by the host at ``config.max_turns``;
            ``declared_max_turns``: uncapped.
        episode_seed: the seed the program's ``reset`` received; ``episode_return``: rewards so far.

    Actions that are not ``str`` are converted (``bytes`` as UTF-8, ``None`` to ``""``, else
    ``str()``) and cut to ``config.max_action_chars``; episodes end after ``max_turns`` actions.
    An episode whose observations and hints exceed ``config.max_episode_text_bytes`` in all ends
    as ``OUTPUT_LIMIT`` (by ``on_error``; a ``hint()`` over it raises).
    ``ProgramError``: the program fails the static check; ``SandboxError``: it fails to load.
    """

    metadata = {"render_modes": ["ansi", "human"]}

    def __init__(
        self,
        program: EnvProgram | str | os.PathLike[str],
        *,
        config: SandboxConfig | None = None,
        on_error: ErrorMode = "truncate",
        render_mode: str | None = None,
    ) -> None:
        if on_error not in ("truncate", "raise"):
            raise ValueError(f"on_error must be 'truncate' or 'raise', got {on_error!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        # The restricted compile runs in the worker, under the load deadline (see EnvProgram.problems).
        self.program = _as_program(program).check(restricted_compile=False)
        self.config = config or SandboxConfig()
        self.on_error: ErrorMode = on_error
        self.render_mode = render_mode
        self.client = SandboxClient(self.config)
        spec = self.client.load(self.program.source)
        self.name, self.setting, self.declared_max_turns = spec.name, spec.setting, spec.max_turns
        self.max_turns = min(spec.max_turns, self.config.max_turns)
        self.tools, self.description = spec.tools, spec.description
        limit = self.config.limits.max_text_bytes
        self.observation_space = UnicodeText(max_length=limit, max_bytes=limit)
        self.action_space = UnicodeText(max_length=self.config.max_action_chars)
        self.episode_seed: int | None = None
        self.episode_return = 0.0
        self._budget = Budget(self.config.episode_budget_s, wall_factor=self.config.wall_factor)
        self._turn = 0
        self._done = True
        self._last_obs = ""
        self._text_bytes = 0  # of this episode's observations and hints
        self._sent_action: str | None = None  # a step sent by send_step() and not yet received

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode: ``Env.reset(seed)`` in the program; return ``(observation, info)``.
        ``seed=None`` draws one from the environment's generator (seeded by the last explicit seed);
        ``options`` is unused. Raises :class:`SandboxError` when the program fails in ``reset``."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
            raise ValueError(f"seed must be None or an int in [0, 2**63), got {seed!r:.40}")
        super().reset(seed=seed)
        program_seed = int(seed) if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        self._drain()
        if not self.client.alive or self.client.cpu_used_s > self.config.cpu_seconds / 2:
            # The previous episode killed the worker, or it has used half of its lifetime CPU limit
            # (RLIMIT_CPU): start a fresh one between episodes rather than lose one mid-episode.
            self.client.load(self.program.source)
        self._budget = Budget(self.config.episode_budget_s, wall_factor=self.config.wall_factor)
        self._done = True
        obs, info = self.client.reset(program_seed, self._budget)
        self.episode_seed = program_seed
        self.episode_return = 0.0
        self._turn = 0
        self._text_bytes = 0
        self._held(obs, "reset()")
        self._done = False
        self._last_obs = obs
        return obs, info

    def _held(self, text: str, where: str) -> None:
        """Count ``text`` into the episode's text budget; ResourceLimitExceeded once it is spent."""
        self._text_bytes += len(text.encode("utf-8", "surrogatepass"))
        if self._text_bytes > self.config.max_episode_text_bytes:
            raise ResourceLimitExceeded(
                f"seed {self.episode_seed}: {where} brought the episode's observations and hints to "
                f"{self._text_bytes:,} bytes; the host holds at most {self.config.max_episode_text_bytes:,} "
                "(SandboxConfig.max_episode_text_bytes)",
                category=Category.OUTPUT_LIMIT,
            )

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Pass ``action`` to ``Env.step``; never raises for a bad action (see ``on_error``)."""
        if self._done:
            over = "the episode has ended; call reset()"
            return self._truncated(
                {"type": "EpisodeOver", "category": Category.PROTOCOL_ERROR, "message": over, "traceback": ""}
            )
        action = self._coerce_action(action)
        try:
            if self._sent_action is not None and self._sent_action == action:
                self._sent_action = None
                obs, reward, terminated, truncated, info = self.client.receive()
            else:
                self._drain()
                obs, reward, terminated, truncated, info = self.client.step(action, self._budget)
            self._turn += 1
            self._held(obs, f"step() on turn {self._turn}")
            partial = self.episode_return + reward
            if not -RETURN_TOLERANCE <= partial <= 1 + RETURN_TOLERANCE:  # the contract, on every episode
                raise ContractError(
                    f"seed {self.episode_seed}: the return reached {partial:g} on turn {self._turn}; the sum of "
                    "rewards must stay within [0, 1]",
                    category=Category.INVALID_REWARD,
                )
        except SandboxError as exc:
            self._done = True
            if self.on_error == "raise":
                raise
            return self._truncated(exc.to_dict())
        if not terminated and self._turn >= self.max_turns:
            truncated = True
        self._done = terminated or truncated
        self._last_obs = obs
        self.episode_return = partial
        if self.render_mode == "human":
            self.render()
        return obs, reward, terminated, truncated, info

    def _truncated(self, error: dict[str, str]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return self._last_obs, 0.0, False, True, {RESERVED_INFO_KEY: error}

    def send_step(self, action: Any) -> None:
        """Start ``step(action)`` without waiting; the next ``step`` with the same action collects it.
        Never raises: a failure surfaces in that ``step``."""
        if self._done or self._sent_action is not None:
            return
        action = self._coerce_action(action)
        try:
            self.client.send("step", {"action": action}, self._budget)
        except SandboxError:
            return  # the worker is gone; step() will report it
        self._sent_action = action

    def _drain(self) -> None:
        """Collect (and drop) a step sent with :meth:`send_step` but never collected."""
        if self._sent_action is not None:
            self._sent_action = None
            with contextlib.suppress(SandboxError):
                self.client.receive()

    def hint(self) -> str:
        """The program's privileged hint for the current state (``SandboxError`` if it fails)."""
        self._drain()
        hint = self.client.hint(self._budget)
        if not self._done:
            self._held(hint, "hint()")
        return hint

    def oracle(self) -> str:
        """The action a perfect agent takes now, according to the program (``SandboxError`` if it fails)."""
        self._drain()
        return self.client.oracle(self._budget)

    @property
    def last_observation(self) -> str:
        """The latest observation ``reset`` or ``step`` returned, unescaped (``""`` before a reset)."""
        return self._last_obs

    def render(self) -> str | None:
        """``"ansi"``: return the current observation, escaped; ``"human"``: print it."""
        if self.render_mode == "ansi":
            return escape_text(self._last_obs)
        if self.render_mode == "human":
            print(escape_text(self._last_obs))
        return None

    def close(self) -> None:
        """Kill the worker process; safe to call more than once."""
        client = getattr(self, "client", None)
        if client is not None:
            client.kill()
        super().close()

    def _coerce_action(self, action: Any) -> str:
        if isinstance(action, (bytes, bytearray)):
            text = bytes(action).decode("utf-8", "replace")
        elif action is None:
            text = ""
        else:
            try:
                text = str(action)
            except (KeyboardInterrupt, GeneratorExit):
                raise
            except BaseException:  # noqa: BLE001 - a broken __str__ (even SystemExit) is not a reason to raise
                text = ""
        text = text[: self.config.max_action_chars]
        return text.encode("utf-8", "replace").decode("utf-8")
