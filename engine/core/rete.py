"""The only module that knows durable_rules. It compiles condition trees to durable_rules JSON
rulesets and runs facts through them, handling every sharp edge measured in DESIGN.md:

- a fact no rule can match raises MessageNotHandledException: swallowed (nothing to remember);
- an identical message twice raises MessageObservedException: every message carries our unique
  fact id, and a re-assertion of a fact already held is ignored;
- a two-parameter action is treated as asynchronous, and an exception inside an action is
  swallowed and blocks the session: no action of ours ever runs. Each session drives the C engine
  directly (assert, then start/complete each action it reports) and reads the firings from it,
  which also saves the JSON round trips of session state that durable_rules' Python host makes
  around every action;
- ``set_rulesets`` mutates its input: we hand it a deep copy;
- a ruleset name cannot be registered twice in one host: names are versioned (``recover_v3``);
- a ruleset is never freed (~11 MB for the default rulebook): a network whose rules compile to a
  definition already registered reuses that ruleset (a reload of unchanged rules costs nothing);
- a second ruleset in one process can crash it at a later assertion
  (scripts/repro/durable_two_rulesets.py): ``is_registered`` tells whether a network would
  register a new one, and ``try_definition`` registers one in a child process that the
  controller starts for it (engine.live.reload), so a live controller restarts to load new rules;
- its timers and background dispatch threads are not used: time is our clock's business, so
  the host is created without its dispatch loop and every action runs synchronously, here;
- a ruleset holds at most 1,024 sessions (its state table) and never frees one: the 1,025th
  session's facts were refused, and the process then crashed (SIGSEGV). A closed session whose
  facts were all retracted is empty, so its sid is handed to the next session of that ruleset;
  asking for a session past the limit is a clear ``ReteError``, never a refused fact.

Derived facts are not asserted from inside actions: ``assert_fact`` returns the firings after the
assertion that caused them, and the caller asserts what it derives (no re-entrancy).
"""

from __future__ import annotations
from engine.errors import ReteError

import copy
import itertools
import json
import logging
import threading
from typing import Any, Callable

import durable_rules_engine as _C
from durable import engine as _dr

from engine.core.alpha import AlphaJudge
from engine.facts import Fact
from engine.rulebook.compile import CompiledRule, CompiledRulebook
from engine.rulebook.conditions import AllOf, AnyOf, Cmp, Same

logger = logging.getLogger(__name__)

__all__ = [
    "ReteError",
    "ReteNetwork",
    "ReteSession",
    "compile_rule",
    "fact_message",
    "is_registered",
    "ruleset_definition",
    "try_definition",
]

_NEVER = {"kind": "\x00never"}
#: ``json.dumps(message, ensure_ascii=False)`` without building an encoder per call
_MESSAGE_JSON = json.JSONEncoder(ensure_ascii=False)


class _QuietHost(_dr.Host):
    """A durable_rules host without its background dispatch and timer threads."""

    def _run(self) -> None:
        return None


_HOST: _QuietHost | None = None
_VERSION = itertools.count(1)
_LOCK = threading.RLock()
#: durable_rules never frees a ruleset (about 11 MB each for the default rulebook), so a reload
#: whose rules compile to the same definition reuses the ruleset registered for it: its name by
#: definition, and per name the live sessions (sids are never re-used within a name)
_RULESETS: dict[str, str] = {}
_SESSIONS: dict[str, dict[str, "ReteSession"]] = {}
_SIDS: dict[str, "itertools.count[int]"] = {}
#: per ruleset name, the sids of closed sessions that hold nothing (reused before a new sid)
_FREE: dict[str, list[str]] = {}
#: sessions durable_rules keeps per ruleset (measured: the 1,025th is refused, then it crashes)
SESSION_LIMIT = 1024


def _host() -> _QuietHost:
    global _HOST
    if _HOST is None:
        _HOST = _QuietHost()
    return _HOST


def _where(tree: Any) -> dict:
    if isinstance(tree, AllOf):
        parts = [_where(i) for i in tree.items]
        return {"$and": parts} if len(parts) != 1 else parts[0]
    if isinstance(tree, AnyOf):
        parts = [_where(i) for i in tree.items]
        return {"$or": parts} if len(parts) != 1 else parts[0]
    if isinstance(tree, Same):
        return {tree.attr: {tree.alias: tree.ref_attr}}
    if isinstance(tree, Cmp):
        a, v = tree.attr, tree.value
        if tree.op == "eq":
            return {a: v}
        if tree.op == "ne":
            return {"$or": [{"$nex": {a: 1}}, {"$neq": {a: v}}]}
        if tree.op in ("gt", "ge", "lt", "le"):
            return {{"gt": "$gt", "ge": "$gte", "lt": "$lt", "le": "$lte"}[tree.op]: {a: v}}
        if tree.op == "in":
            if not v:
                return dict(_NEVER)
            return {"$or": [{a: x} for x in v]} if len(v) > 1 else {a: v[0]}
        if tree.op == "not_in":
            if not v:
                return {"$or": [{"$nex": {a: 1}}, {"$ex": {a: 1}}]}
            return {"$or": [{"$nex": {a: 1}}, {"$and": [{"$neq": {a: x}} for x in v]}]}
        if tree.op == "exists":
            return {"$ex": {a: 1}} if v else {"$nex": {a: 1}}
    raise TypeError(f"cannot compile {tree!r}")


def compile_rule(cr: CompiledRule) -> dict:
    """The durable_rules definition of one rule (absent conditions are left to the engine)."""
    rule = cr.rule
    positive = [(c, t) for c, t in zip(rule.conditions, cr.trees) if c.absent_for is None]
    first = positive[0][0].alias
    terms = []
    for i, (cond, tree) in enumerate(positive):
        parts: list[dict] = [{"kind": cond.kind}]
        # The join and time terms come first: durable_rules 2.0.28 drops a reference to an
        # earlier condition that follows an $or or a nested $and in the same $and (measured: a
        # join on job then fires across jobs; tests/core/test_rete_differential.py pins it).
        if i > 0:
            for attr in rule.join:
                parts.append({attr: {first: attr}})
            if rule.within is not None:
                w = rule.within
                parts.append({"$lte": {"at": {"$add": {"$l": {first: "at"}, "$r": w}}}})
                parts.append({"$gte": {"at": {"$sub": {"$l": {first: "at"}, "$r": w}}}})
        if len(positive) > 1:
            # a join attribute must be there to be equal: facts of an unknown job never meet a
            # job's facts (see conditions.join_holds, the reference)
            parts.extend({"$ex": {attr: 1}} for attr in rule.join)
        if tree.items:
            where = _where(tree)
            parts.extend(where["$and"] if set(where) == {"$and"} else [where])
        terms.append({cond.alias: {"$and": parts} if len(parts) > 1 else parts[0]})
    return {"all": terms}


def fact_message(fact: Fact, sid: str) -> dict:
    msg: dict[str, Any] = {}
    for k, v in fact.attrs.items():
        if v is None:
            continue
        msg[k] = list(v) if isinstance(v, tuple) else v
    msg.update({"id": fact.id, "sid": sid, "kind": fact.kind, "at": fact.at})
    return msg


def _never_run(c: Any) -> None:  # exactly one parameter: durable_rules would run it synchronously
    """The ``run`` durable_rules requires of every rule. It is never called: sessions drive the C
    engine themselves and read each firing's matched facts from it (``ReteSession._call``)."""


def _bodies(compiled: CompiledRulebook) -> tuple[dict[str, CompiledRule], dict[str, dict]]:
    """The rules that go into the Rete by key, and the durable_rules definition of each (less the
    ``run`` durable_rules wants): matchers, actions and policy are not part of it."""
    rules: dict[str, CompiledRule] = {}
    bodies: dict[str, dict] = {}
    for idx, cr in enumerate(compiled.rules):
        if not any(c.absent_for is None for c in cr.rule.conditions):
            continue
        key = f"r{idx}"
        rules[key] = cr
        bodies[key] = compile_rule(cr)
    if not bodies:  # durable_rules needs at least one rule
        bodies["r_none"] = {"all": [{"m": dict(_NEVER)}]}
    return rules, bodies


def _signature(bodies: dict[str, dict]) -> str:
    return json.dumps(bodies, sort_keys=True, default=str)


def _register(bodies: dict[str, dict]) -> str:
    """Register a definition in this process's host under a new versioned name (the caller holds
    _LOCK); ReteError when durable_rules refuses it."""
    name = f"recover_v{next(_VERSION)}"
    definition = {key: dict(body, run=_never_run) for key, body in bodies.items()}
    try:
        _host().register_rulesets({name: copy.deepcopy(definition)})  # it mutates its input
    except Exception as exc:
        raise ReteError(f"durable_rules refused the ruleset: {exc}") from exc
    _RULESETS[_signature(bodies)] = name
    _SESSIONS[name] = {}
    _SIDS[name] = itertools.count(1)
    _FREE[name] = []
    return name


def ruleset_definition(compiled: CompiledRulebook) -> str:
    """The durable_rules ruleset these rules compile to, as JSON (what ``try_definition`` takes)."""
    return json.dumps(_bodies(compiled)[1], ensure_ascii=False)


def is_registered(compiled: CompiledRulebook) -> bool:
    """Does this process already hold a ruleset for these rules? Then a ``ReteNetwork`` for them
    registers nothing new; otherwise it would be a second ruleset in this process, which
    durable_rules 2.0.28 does not survive (scripts/repro/durable_two_rulesets.py): a new one is
    tried in a child process first (``try_definition``) and loaded by a restart."""
    with _LOCK:
        return _signature(_bodies(compiled)[1]) in _RULESETS


def try_definition(definition: str) -> None:
    """Register a ruleset (``ruleset_definition``'s JSON) in this process and assert one fact no
    rule can match: ReteError when durable_rules refuses it. Meant for a fresh child process
    (engine.live.reload runs it there), never for one that holds a ruleset already."""
    try:
        bodies = json.loads(definition)
    except ValueError as exc:
        raise ReteError(f"not a ruleset definition: {exc}") from exc
    with _LOCK:
        name = _RULESETS.get(_signature(bodies)) or _register(bodies)
        handle = _host().get_ruleset(name)._handle
        probe = json.dumps({"id": "probe", "sid": "probe", "kind": "\x00probe", "at": 0.0})
        try:
            _C.assert_fact(handle, probe)
        except Exception as exc:
            raise ReteError(f"durable_rules refused a fact: {exc}") from exc


class ReteNetwork:
    """One compiled rulebook registered in the process-wide host under a versioned name."""

    def __init__(self, compiled: CompiledRulebook):
        self.compiled = compiled
        self.rules, bodies = _bodies(compiled)
        #: the kinds some rule's condition names: a fact of any other kind reaches no rule
        self.kinds = frozenset(c.kind for cr in self.rules.values() for c in cr.rule.conditions if c.absent_for is None)
        #: facts no correlation can read, judged without the Rete (engine.core.alpha)
        self.alpha = AlphaJudge(self.rules.values())
        with _LOCK:
            name = _RULESETS.get(_signature(bodies))
            self.reused = name is not None
            if name is None:
                name = _register(bodies)
            self.name = name
            self._sessions = _SESSIONS[name]
            self._sids = _SIDS[name]
            self._free = _FREE[name]
            self._ruleset = _host().get_ruleset(name)
            self._handle = self._ruleset._handle  # the C engine's ruleset, driven directly

    def definition_json(self) -> str:
        """The JSON handed to durable_rules (for golden tests and debugging)."""
        out = {}
        for _key, cr in self.rules.items():
            out[cr.rule.id] = compile_rule(cr)
        return json.dumps(out, sort_keys=True, indent=1)

    def session(self, sid: str | None = None, alpha: bool = False) -> "ReteSession":
        """A new, empty session: the sid of a closed one where there is one (see ``SESSION_LIMIT``).
        ``alpha``: facts no correlation can read are judged in Python (``engine.core.alpha``), as
        the engine's fast path does; False (the default): every fact goes to durable_rules."""
        with _LOCK:
            if sid is None:
                if self._free:
                    sid = self._free.pop()
                else:
                    n = next(self._sids)
                    if n > SESSION_LIMIT:
                        raise ReteError(
                            f"rule engine: {SESSION_LIMIT} sessions of one rulebook are open in this process, "
                            "the most durable_rules can hold; close engines that are done (Engine.close)"
                        )
                    sid = str(n)
            s = ReteSession(self, sid, alpha)
            self._sessions[sid] = s
            return s

    def close_session(self, sid: str, empty: bool = False) -> None:
        # durable_rules never frees a session's state (delete_state crashed the process in our
        # measurements): a session that holds no fact any more is handed on to the next one
        with _LOCK:
            if self._sessions.pop(sid, None) is not None and empty and sid not in self._free:
                self._free.append(sid)


class ReteSession:
    """Facts in, firings out: ``assert_fact`` returns [(CompiledRule, {alias: fact-dict})]."""

    def __init__(self, network: ReteNetwork, sid: str, alpha: bool = False):
        self.network = network
        self.sid = sid
        self._held: dict[str, str] = {}  # fact id -> its message (JSON), for retraction
        self.handled = True  # did the last assertion reach any rule?
        self._alpha = network.alpha if alpha else None
        self.judged = 0  # facts judged without the Rete (engine.core.alpha)

    def __len__(self) -> int:
        return len(self._held)

    def _call(self, fn: Callable[[Any, str], Any], payload: str, fact_id: str) -> list[tuple[CompiledRule, dict]]:
        """Run one assertion or retraction through durable_rules' C engine and collect the
        firings it starts. The engine is driven directly (what its Python ``Host`` does, less the
        JSON round trips of session state between actions, which our actions never change)."""
        rules = self.network.rules
        handle = self.network._handle
        with _LOCK:
            self.handled = True
            try:
                result = fn(handle, payload)
            except Exception as exc:
                raise ReteError(f"durable_rules refused fact {fact_id}: {exc}") from exc
            code = result[0]
            if code == 1:
                self.handled = False  # no rule can use it: durable_rules did not keep it
                return []
            if code == 2:
                return []  # observed before: nothing new
            state = 0 if code == 3 else result[1]
            fired: list[tuple[CompiledRule, dict]] = []
            try:
                started = _C.start_action_for_state(handle, state)
                if started:
                    session_state = started[0]
                while started:
                    for key, matched in json.loads(started[1]).items():
                        cr = rules.get(key)
                        if cr is not None:
                            fired.append((cr, matched))
                    # what durable_rules' host does after each action: the session's state is
                    # written back before the action completes (without it the C engine crashed)
                    _C.update_state(handle, session_state)
                    message = _C.complete_and_start_action(handle, state)
                    started = (None, message) if message else None
            except Exception as exc:
                raise ReteError(f"a rule action failed: {exc!r}") from exc
            return fired

    def assert_fact(self, fact: Fact) -> list[tuple[CompiledRule, dict]]:
        if fact.id in self._held:
            return []
        if fact.kind not in self.network.kinds:
            self.handled = False  # no rule's condition names its kind: durable_rules would not keep it
            return []
        msg = fact_message(fact, self.sid)
        if self._alpha is not None:
            judged = self._alpha.judge(msg)
            if judged is not None:  # no correlation can read it: what the Rete would say, without it
                self.judged += 1
                self.handled = bool(judged)
                return judged
        payload = _MESSAGE_JSON.encode(msg)
        self._held[fact.id] = payload
        try:
            fired = self._call(_C.assert_fact, payload, fact.id)
        except ReteError:
            self._held.pop(fact.id, None)
            raise
        if not self.handled:
            self._held.pop(fact.id, None)
        return fired

    def retract_fact(self, fact_id: str) -> list[tuple[CompiledRule, dict]]:
        payload = self._held.pop(fact_id, None)
        if payload is None:
            return []
        return self._call(_C.retract_fact, payload, fact_id)

    def held(self) -> list[str]:
        return list(self._held)

    def close(self) -> None:
        """Retract every fact this session holds (their memory is reused) and forget it: what a
        replaced or finished engine does. A session left empty hands its sid to the next one."""
        clean = True
        for fact_id in list(self._held):
            try:
                self.retract_fact(fact_id)
            except ReteError as exc:
                clean = False  # durable_rules may still hold it: this sid is not handed on
                logger.debug("closing session %s: %s", self.sid, exc)
        self.network.close_session(self.sid, empty=clean and not self._held)
