"""The walk a sweep takes through the house, recorded with a profile hook: floors, climbs, parses.

The parts are floors (``core/layers.py``) and imports point down. Control
may still go up, and the output folder (the ``Layout``) is handed from room
to room. ``traced_sweep`` runs ``pipeline.run_sweep`` in this process with
``sys.setprofile`` and ``threading.setprofile`` on and gives back a ``Walk``:

- ``rooms``: the modules handed the layout (a function's argument; the
  layout's own methods aside), in each stage in the order first entered;
- ``climbs``: each step of the layout's walk, in the order of the calls,
  from the module it was last handed to up to a module on a higher floor,
  within a stage (a stage starts at the top, ``commands/pipeline.py``, by
  the data's order, so the step from one stage to the next is not one): the
  stage went down, to read say, and came back up to hand the layout on;
- ``calls_up``: the calls from a lower floor into a higher one (a function
  or generator a higher part handed down), by call site;
- ``parses``: how many times each JSON-lines file was parsed in each stage
  (``catalogue._lines`` and ``layout.read_jsonl``, counted when the file is
  there).

Only the sweep's own process is traced, not the jobs of worker processes
(one file's reading or scan each). The bench ``bench/house/walk.py`` prints
it for a folder of real text; ``commands/test_sweep_walk.py`` holds the
counts to their targets.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from pathlib import Path

from bastion_agent.commands import pipeline
from bastion_agent.core import catalogue
from bastion_agent.core.layers import FLOOR

PACKAGE_DIR = str(Path(pipeline.__file__).resolve().parents[2]) + "/"  # the folder that holds bastion_agent
# The functions that parse a JSON-lines file, and the argument that names it.
PARSERS = {("bastion_agent.core.catalogue", "_lines"): "path", ("bastion_agent.core.layout", "read_jsonl"): "path"}


class Walk:
    """What the profile hook saw in one sweep (``traced_sweep``)."""

    def __init__(self, layout):
        self.layout = layout
        self.out = Path(layout.root)
        self.stage = "(before)"
        self.rooms: list[tuple[str, str]] = []  # (stage, module), first entry in each stage
        self.calls_up: Counter = Counter()  # (caller function, callee function) -> calls
        self.parses: Counter = Counter()  # (stage, file under the output folder) -> parses
        self.steps_up: Counter = Counter()  # (stage, from module, to module) -> times, the layout going up
        self._last: tuple[str, str] | None = None  # (stage, module) the layout was last handed to
        self._where: dict = {}

    def where(self, code) -> tuple[str, str] | None:
        """``(module, part)`` of a code object of the package, else None; cached per code object."""
        found = self._where.get(code, False)
        if found is False:
            found = None
            if code.co_filename.startswith(PACKAGE_DIR):
                parts = Path(code.co_filename[len(PACKAGE_DIR):]).with_suffix("").parts
                if parts[0] == "bastion_agent" and len(parts) > 1 and parts[1] in FLOOR:
                    found = (".".join(parts), parts[1])
            self._where[code] = found
        return found

    def hook(self, frame, event, arg) -> None:
        if event != "call":
            return
        callee = self.where(frame.f_code)
        if callee is None:
            return
        module, part = callee
        name = frame.f_code.co_name
        if module == "bastion_agent.commands.pipeline" and name == "run_timed":
            self.stage = frame.f_locals.get("name", self.stage)
        self._count_parse(frame, module, name)
        self._enter_room(frame, module)
        caller = frame.f_back
        while caller is not None and self.where(caller.f_code) is None:
            caller = caller.f_back  # through the standard library (a map, a pool's thread) to our code
        if caller is not None:
            from_module, from_part = self.where(caller.f_code)
            if FLOOR[part] > FLOOR[from_part]:
                self.calls_up[(f"{from_module}.{caller.f_code.co_name}", f"{module}.{name}")] += 1

    def _count_parse(self, frame, module: str, name: str) -> None:
        argument = PARSERS.get((module, name))
        if argument is None:
            return
        path = Path(str(frame.f_locals.get(argument)))
        if path.is_file():
            self.parses[(self.stage, str(path.relative_to(self.out)) if path.is_relative_to(self.out)
                         else path.name)] += 1

    def _enter_room(self, frame, module: str) -> None:
        code = frame.f_code
        arguments = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if arguments[:1] == ("self",) and frame.f_locals.get("self") is self.layout:
            return  # the layout's own methods (a path under it) are the layout, not a room it is handed to
        if not any(frame.f_locals.get(argument) is self.layout for argument in arguments):
            return
        if (self.stage, module) not in self.rooms:
            self.rooms.append((self.stage, module))
        last, self._last = self._last, (self.stage, module)
        if last is not None and last[0] == self.stage and last[1] != module \
                and FLOOR[module.split(".")[1]] > FLOOR[last[1].split(".")[1]]:
            self.steps_up[(self.stage, last[1], module)] += 1

    def climb_count(self) -> int:
        """How many climbs the walk made, in every stage."""
        return sum(self.steps_up.values())

    def report(self) -> dict:
        """The walk as JSON: rooms, climbs, calls up, parses per stage and file."""
        return {
            "rooms": [f"{stage}: {module} ({FLOOR[module.split('.')[1]]})" for stage, module in self.rooms],
            "climb_count": self.climb_count(),
            "climbs": [{"stage": stage, "from": before, "to": after, "times": times}
                       for (stage, before, after), times in self.steps_up.items()],
            "calls_up": [{"from": caller, "to": callee, "calls": calls}
                         for (caller, callee), calls in sorted(self.calls_up.items())],
            "parses": [{"stage": stage, "file": name, "parses": count} for (stage, name), count in self.parses.items()],
            "most_parses_of_a_file_in_a_stage": max(self.parses.values(), default=0),
        }


def traced_sweep(manifest, layout) -> Walk:
    """One sweep (``pipeline.run_sweep``) into ``layout`` under the profile hook, as a fresh process starts it."""
    catalogue.forget()
    walk = Walk(layout)
    threading.setprofile(walk.hook)
    sys.setprofile(walk.hook)
    try:
        pipeline.run_sweep(manifest, layout)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return walk
