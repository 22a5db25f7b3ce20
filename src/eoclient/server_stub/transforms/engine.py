"""The JavaScript engine: each UDF in a V8 isolate of its own (mini-racer), run off the loop.

Why V8 through mini-racer, and what was measured, is in docs/server/transforms.md. What
this module keeps:

* **Isolation.** One mini-racer context (a V8 isolate, ~1.7 MB) per UDF: a UDF sees no other
  UDF's globals, and its heap has a hard limit of its own (``TransformLimits``).
* **Batches.** A call into the engine costs ~120 µs, a small UDF ~15 µs a message, so a
  batch of messages goes in one call (``_RUNNER`` loops over them in JavaScript) and the
  results come back as one JSON text.
* **Time.** Every call has a timeout of ``time_per_message``. The runner records each
  message's result as it goes, so when a call is cut off the results it made are kept:
  if none was made, the message it was on failed (it had the whole timeout alone);
  otherwise the rest are run again in a new call. A message fails for time only when it
  alone ran ``time_per_message``, and ``while (true) {}`` costs each of its messages one
  timeout, never more.
* **Memory.** A UDF that passes its heap limit is stopped by V8; its isolate is
  discarded and a new one loaded, and the rest of the batch runs one message per call
  so that the failure falls on the message that caused it.
* **Threads.** A ``Chain`` (one resource's UDFs) runs every call in a thread of its own,
  so a slow UDF holds neither the event loop nor another resource's transforms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from eoclient.server_stub.transforms.rules import (
    Failed,
    Outcome,
    Transformed,
    TransformLimits,
    Udf,
    interpret,
    udf_input,
)

__all__ = [
    "Chain",
    "EngineMissing",
    "MessageIn",
    "UdfCodeError",
    "check_udf",
    "engine_missing",
]

# Defined after the UDF's own code, in the same global scope: calls the UDF on each
# message of a batch and keeps each result as JSON text as soon as it has it, so that
# ``__eoclient_done`` can hand over what a call that was cut off already made.
_RUNNER = """
var __eoclient_out = [];
function __eoclient_run(payload) {
  const items = JSON.parse(payload);
  __eoclient_out = [];
  for (let i = 0; i < items.length; i++) {
    const item = items[i];
    let record;
    try {
      const value = %(name)s({data: item.d, attributes: item.a}, item.m);
      record = value === undefined ? "{}" : JSON.stringify({v: value});
    } catch (e) {
      record = JSON.stringify({e: String(e)});
    }
    __eoclient_out.push(record);
  }
  return "[" + __eoclient_out.join(",") + "]";
}
function __eoclient_done() { return "[" + __eoclient_out.join(",") + "]"; }
"""
# Reading back what a cut-off call made is a join of strings: this is ample.
_READ_BACK_SECONDS = 5.0


class EngineMissing(Exception):
    """mini-racer is not installed (``pip install 'eoclient[transforms]'``)."""


class UdfCodeError(Exception):
    """The UDF's code does not load: it does not parse, throws or runs too long at the
    top level, or does not define ``function_name`` as a function. The text says which."""


def engine_missing() -> str | None:
    """None when the engine can be loaded; else the line that says how to install it."""
    import importlib.util

    if importlib.util.find_spec("py_mini_racer") is None:
        return (
            "message transforms need a JavaScript engine: mini-racer is not installed "
            "(pip install 'eoclient[transforms]', part of eoclient[server])"
        )
    return None


def _racer_module() -> Any:
    missing = engine_missing()
    if missing is not None:
        raise EngineMissing(missing)
    import py_mini_racer

    return py_mini_racer


_callback_loop: asyncio.AbstractEventLoop | None = None
_callback_loop_lock = threading.Lock()


def _engine_loop() -> asyncio.AbstractEventLoop:
    """The one event loop mini-racer delivers V8's answers on, for every isolate of the
    process, running in a daemon thread of its own. Left to itself mini-racer starts a
    loop per isolate and stops it before freeing the isolate, and an answer V8 sends in
    between (the end of a call it was told to cut off) meets a closed loop; a loop that
    outlives every isolate never does, and saves a thread per UDF."""
    global _callback_loop
    with _callback_loop_lock:
        if _callback_loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(
                target=loop.run_forever, name="eoclient-udf-engine", daemon=True
            ).start()
            _callback_loop = loop
        return _callback_loop


def _first_line(error: BaseException) -> str:
    """V8's message without the source excerpt it appends ("<anonymous>:3: SyntaxError:
    ..." becomes "line 3: SyntaxError: ...")."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if text.startswith("<anonymous>:"):
        line, _, rest = text[len("<anonymous>:") :].partition(":")
        text = f"line {line}:{rest}" if line.isdigit() else rest.strip()
    return text


class _UdfContext:
    """One UDF loaded in its own isolate (load: raises ``UdfCodeError``)."""

    def __init__(self, udf: Udf, limits: TransformLimits) -> None:
        racer_module = _racer_module()
        self._errors = racer_module
        self.udf = udf
        self.limits = limits
        self._isolate = contextlib.ExitStack()
        self._racer = self._new_racer()
        try:
            self._load()
        except BaseException:
            self._isolate.close()
            raise

    def _new_racer(self) -> Any:
        return self._isolate.enter_context(self._errors.mini_racer(_engine_loop()))

    def _load(self) -> None:
        m = self._errors
        racer = self._racer
        racer.set_hard_memory_limit(self.limits.memory_bytes)
        name = self.udf.function_name
        try:
            racer.eval(self.udf.code, timeout_sec=self.limits.time_per_message)
        except m.JSParseException as error:
            raise UdfCodeError(f"the code does not parse: {_first_line(error)}") from None
        except m.JSTimeoutException:
            raise UdfCodeError(
                f"the code's top level ran longer than {self.limits.time_per_message:g} s"
            ) from None
        except m.JSOOMException:
            raise UdfCodeError("the code's top level ran out of memory") from None
        except m.JSEvalException as error:
            raise UdfCodeError(f"the code threw when loaded: {_first_line(error)}") from None
        kind = racer.eval(f"typeof {name}")
        if kind == "undefined":
            raise UdfCodeError(f"the code does not define the function {name}")
        if kind != "function":
            raise UdfCodeError(f"{name} is not a function in the code (it is a {kind})")
        racer.eval(_RUNNER % {"name": name})

    def close(self) -> None:
        self._isolate.close()

    def reload(self) -> None:
        """A fresh isolate for the same UDF (after its heap limit was reached)."""
        self._isolate.close()
        self._isolate = contextlib.ExitStack()
        self._racer = self._new_racer()
        self._load()

    def run(self, items: Sequence[Mapping[str, object]]) -> list[Mapping[str, Any] | Failed]:
        """One record per item (see ``rules.interpret``), or ``Failed`` for an item that
        ran out of time or memory."""
        m = self._errors
        results: list[Mapping[str, Any] | Failed] = []
        one_by_one = False
        while len(results) < len(items):
            rest = items[len(results) :]
            chunk = rest[:1] if one_by_one else rest
            try:
                text = self._racer.call(
                    "__eoclient_run", json.dumps(chunk), timeout_sec=self.limits.time_per_message
                )
                results.extend(json.loads(text))
            except m.JSTimeoutException:
                done = json.loads(
                    self._racer.call("__eoclient_done", timeout_sec=_READ_BACK_SECONDS)
                )
                results.extend(done)
                if not done:
                    results.append(
                        Failed(
                            "the function ran longer than the server's limit of "
                            f"{self.limits.time_per_message:g} s for one message"
                        )
                    )
            except m.JSOOMException:
                if one_by_one:
                    results.append(
                        Failed(
                            "the function ran out of memory (the server's limit is "
                            f"{self.limits.memory_bytes // 2**20} MiB)"
                        )
                    )
                one_by_one = True  # the rest one per call: a failure is its message's
                self.reload()
            except m.JSEvalException as error:  # the runner itself failed: nothing to keep
                reason = Failed(f"the engine failed: {_first_line(error)}")
                results.extend(reason for _ in chunk)
        return results


def check_udf(udf: Udf, limits: TransformLimits) -> str | None:
    """Load ``udf`` in a scratch isolate: None when it loads, else what is wrong (the
    create/update check; blocking, run it off the loop)."""
    try:
        context = _UdfContext(udf, limits)
    except UdfCodeError as error:
        return str(error)
    context.close()
    return None


@dataclass(frozen=True, slots=True)
class MessageIn:
    """A message as a chain sees it (metadata left empty where not known yet)."""

    data: bytes
    attributes: Mapping[str, str]
    message_id: str = ""
    publish_time: float | None = None
    ordering_key: str = ""


class Chain:
    """One resource's enabled UDFs, applied in order, each on the survivors of the one
    before, in a thread of the chain's own. Loaded on first use; ``close`` frees it."""

    def __init__(self, udfs: Sequence[Udf], limits: TransformLimits) -> None:
        self.udfs = tuple(udfs)
        self.limits = limits
        self._contexts: list[_UdfContext] | None = None
        self._load_error: str | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="eoclient-udf")

    async def apply(self, messages: Sequence[MessageIn]) -> list[Outcome]:
        """One outcome per message, computed off the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.apply_blocking, messages)

    def close(self) -> None:
        """Free the isolates after whatever batch is running (never waits for it)."""
        self._executor.submit(self._close_contexts)
        self._executor.shutdown(wait=False)

    def _close_contexts(self) -> None:
        for context in self._contexts or ():
            context.close()
        self._contexts = None

    def _loaded(self) -> list[_UdfContext] | str:
        if self._contexts is None and self._load_error is None:
            contexts: list[_UdfContext] = []
            try:
                for udf in self.udfs:
                    contexts.append(_UdfContext(udf, self.limits))
            except (UdfCodeError, EngineMissing) as error:
                for context in contexts:
                    context.close()
                self._load_error = str(error)
            else:
                self._contexts = contexts
        if self._contexts is None:
            assert self._load_error is not None
            return self._load_error
        return self._contexts

    def apply_blocking(self, messages: Sequence[MessageIn]) -> list[Outcome]:
        """``apply`` on the calling thread (the chain's own; tests and benchmarks)."""
        contexts = self._loaded()
        if isinstance(contexts, str):
            failed = Failed(f"the transform does not load: {contexts}")
            return [failed for _ in messages]
        outcomes: list[Outcome | None] = [None] * len(messages)
        current: list[tuple[bytes, Mapping[str, str]]] = [(m.data, m.attributes) for m in messages]
        live = list(range(len(messages)))
        for context in contexts:
            items: list[Mapping[str, object]] = []
            running: list[int] = []
            for index in live:
                message = messages[index]
                data, attributes = current[index]
                item = udf_input(
                    data,
                    attributes,
                    message_id=message.message_id,
                    publish_time=message.publish_time,
                    ordering_key=message.ordering_key,
                )
                if isinstance(item, Failed):
                    outcomes[index] = item
                else:
                    items.append(item)
                    running.append(index)
            records = context.run(items) if items else []
            live = []
            for index, record in zip(running, records, strict=True):
                outcome = (
                    record if isinstance(record, Failed) else interpret(record, current[index][1])
                )
                if isinstance(outcome, Transformed):
                    current[index] = (outcome.data, outcome.attributes)
                    live.append(index)
                else:
                    outcomes[index] = _named(outcome, context.udf.function_name)
        for index in live:
            data, attributes = current[index]
            outcomes[index] = Transformed(data, attributes)
        return [o if o is not None else Failed("not run") for o in outcomes]


def _named(outcome: Outcome, function_name: str) -> Outcome:
    """A failure says which UDF of the chain failed."""
    if isinstance(outcome, Failed):
        return Failed(f"message transform {function_name}: {outcome.reason}")
    return outcome
