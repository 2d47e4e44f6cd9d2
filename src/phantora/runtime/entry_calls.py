"""Put a call at every entry of a function's bytecode: its start and each resumption of a generator or coroutine
(CPython 3.11 and 3.12).

Note: [A call at every entry]
Library Python is priced per call of each function (models/python_prices.py Note [Library Python]). The prices
were measured with cProfile, which counts an entry of a frame as a call: a function's start, and each time a
generator, coroutine or generator expression resumes. Each such entry begins with a RESUME instruction, so
`with_entry_calls` inserts, after every RESUME of a code object, the bytecode of `<name>(<argument>)` with its
result dropped:
    3.11: LOAD_GLOBAL (name, with NULL) · LOAD_CONST argument · PRECALL 1 · CALL 1 · POP_TOP
    3.12: LOAD_GLOBAL (name, with NULL) · LOAD_CONST argument · CALL 1 · POP_TOP
`name` is looked up as any global is, so the callee may live in `builtins` and need nothing from the module;
torch.compile reads the call like any other (runtime/python_prices.py gives it a no-op in compiled graphs).
Only code that calls it pays: other code runs at full speed, unlike a profile function (`sys.setprofile`), which
puts every Python call of a thread on CPython's slower, unspecialized path.

The rest of the code object is moved, not changed: relative jumps get their new distances (with EXTENDED_ARG
prefixes where a distance outgrows a byte), the exception table its new offsets, and the location table (PEP 626)
the same positions per instruction, the inserted ones with none, so tracebacks, `dis`, debuggers and coverage
see the function as it was. The stack grows by the three slots of the call.
"""

from __future__ import annotations

import dis
import inspect
import opcode
import sys
from collections.abc import Callable, Iterator
from types import CodeType

if sys.version_info[:2] not in ((3, 11), (3, 12)):
    raise ImportError(f"entry calls are written for CPython 3.11 and 3.12 bytecode, not {sys.version.split()[0]}")

_OP = dis.opmap
_RESUME, _EXTENDED_ARG = _OP["RESUME"], _OP["EXTENDED_ARG"]
_CACHES: list[int] = list(opcode._inline_cache_entries)  # inline cache units after each opcode
_JUMPS = frozenset(dis.hasjrel)  # 3.11 and 3.12 jump only relatively (dis.hasjabs is empty)
_BACKWARD = frozenset(code for name, code in _OP.items() if "JUMP_BACKWARD" in name)
_STACK_OF_CALL = 3  # NULL, the callee, the argument


class _Instruction:
    """One instruction of the original code: opcode, full argument, and where it starts (units, EXTENDED_ARG
    prefixes included) and where its opcode sits."""

    __slots__ = ("op", "arg", "start", "at", "new_start", "new_arg")

    def __init__(self, op: int, arg: int, start: int, at: int) -> None:
        self.op, self.arg, self.start, self.at = op, arg, start, at
        self.new_start, self.new_arg = 0, arg

    def target(self) -> int:
        """The unit a jump lands on: relative to the unit after the jump and its caches."""
        distance = -self.arg if self.op in _BACKWARD else self.arg
        return self.at + 1 + _CACHES[self.op] + distance


def _decode(code: bytes) -> list[_Instruction]:
    instructions: list[_Instruction] = []
    extended, start, unit, units = 0, 0, 0, len(code) // 2
    while unit < units:
        op, arg = code[2 * unit], code[2 * unit + 1]
        if op == _EXTENDED_ARG:
            extended = (extended | arg) << 8
            unit += 1
            continue
        instructions.append(_Instruction(op, extended | arg, start, unit))
        unit += 1 + _CACHES[op]
        extended, start = 0, unit
    return instructions


def _prefix_units(arg: int) -> int:
    """EXTENDED_ARG units an argument needs."""
    return 0 if arg < 1 << 8 else 1 if arg < 1 << 16 else 2 if arg < 1 << 24 else 3


def _emit(out: bytearray, op: int, arg: int) -> None:
    for shift in range(8 * _prefix_units(arg), 0, -8):
        out += bytes((_EXTENDED_ARG, (arg >> shift) & 0xFF))
    out += bytes((op, arg & 0xFF))
    out += bytes(2 * _CACHES[op])


def _call_bytecode(name_index: int, const_index: int) -> bytes:
    out = bytearray()
    _emit(out, _OP["LOAD_GLOBAL"], name_index << 1 | 1)  # the low bit pushes the NULL a plain call needs
    _emit(out, _OP["LOAD_CONST"], const_index)
    if "PRECALL" in _OP:
        _emit(out, _OP["PRECALL"], 1)
    _emit(out, _OP["CALL"], 1)
    _emit(out, _OP["POP_TOP"], 0)
    return bytes(out)


def _lay_out(instructions: list[_Instruction], call_units: int) -> int:
    """Give each instruction its new start and each jump its new distance, until no distance needs another
    EXTENDED_ARG; returns the new length in units."""
    by_start = {ins.start: ins for ins in instructions}
    while True:
        position, grew = 0, False
        for ins in instructions:
            ins.new_start = position
            position += _prefix_units(ins.new_arg) + 1 + _CACHES[ins.op]
            if ins.op == _RESUME:
                position += call_units
        for ins in instructions:
            if ins.op in _JUMPS:
                after = ins.new_start + _prefix_units(ins.new_arg) + 1 + _CACHES[ins.op]
                distance = abs(by_start[ins.target()].new_start - after)
                if _prefix_units(distance) != _prefix_units(ins.new_arg):
                    grew = True
                ins.new_arg = distance
        if not grew:
            return position


_RESUMES_AGAIN = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
"""Code that may hold a RESUME past its start (after a yield or an await)."""


def with_entry_calls(code: CodeType, name: str, argument: object) -> CodeType:
    """`code` with `name(argument)` called at each of its entries (Note [A call at every entry]); nested code
    objects are left as they are (`rewrite_all` does them)."""
    names = code.co_names if name in code.co_names else (*code.co_names, name)
    consts = (*code.co_consts, argument)
    call = _call_bytecode(names.index(name), len(consts) - 1)
    if code.co_flags & _RESUMES_AGAIN:
        code_bytes, exception_table, location_table = _at_every_resume(code, call)
    else:
        code_bytes, exception_table, location_table = _at_the_start(code, call)
    return code.replace(co_code=code_bytes, co_consts=consts, co_names=names,
                        co_stacksize=code.co_stacksize + _STACK_OF_CALL,
                        co_exceptiontable=exception_table, co_linetable=location_table)


def _at_the_start(code: CodeType, call: bytes) -> tuple[bytes, bytes, bytes]:
    """The call after the only RESUME, which ends the prologue (MAKE_CELL, COPY_FREE_VARS): every jump lies after
    it, so no distance changes; offsets past it move by the call's length."""
    original = code.co_code
    at = next(unit for unit in range(len(original) // 2) if original[2 * unit] == _RESUME) + 1
    units = len(call) // 2
    moved = {start: start + units if start >= at else start
             for start in _exception_boundaries(code.co_exceptiontable)}
    return (original[:2 * at] + call + original[2 * at:], _moved_exception_table(code.co_exceptiontable, moved),
            _location_table_with_gap(code.co_linetable, at, units))


def _at_every_resume(code: CodeType, call: bytes) -> tuple[bytes, bytes, bytes]:
    """The call after each RESUME: the code is laid out again, jumps with their new distances."""
    instructions = _decode(code.co_code)
    call_units = len(call) // 2
    total = _lay_out(instructions, call_units)
    new_start = {ins.start: ins.new_start for ins in instructions}
    new_start[len(code.co_code) // 2] = total
    out = bytearray()
    for ins in instructions:
        _emit(out, ins.op, ins.new_arg)
        if ins.op == _RESUME:
            out += call
    return (bytes(out), _moved_exception_table(code.co_exceptiontable, new_start),
            _location_table(_new_positions(code, instructions, call_units), code.co_firstlineno))


def rewrite_all(code: CodeType, rewrite: Callable[[CodeType], CodeType]) -> CodeType:
    """`rewrite` applied to `code` and to every code object nested in its constants, innermost first."""
    consts = tuple(rewrite_all(const, rewrite) if isinstance(const, CodeType) else const
                   for const in code.co_consts)
    if any(new is not old for new, old in zip(consts, code.co_consts)):
        code = code.replace(co_consts=consts)
    return rewrite(code)


# --- the exception table: (start, length, target, depth and lasti) per entry, in 6-bit varints ---

def _read_exception_table(table: bytes) -> Iterator[tuple[int, int, int, int]]:
    position = 0

    def varint() -> int:
        nonlocal position
        byte = table[position]
        value = byte & 63
        position += 1
        while byte & 64:
            byte = table[position]
            value = (value << 6) | (byte & 63)
            position += 1
        return value

    while position < len(table):
        start = varint()
        length = varint()
        yield start, length, varint(), varint()


def _write_exception_varint(out: bytearray, value: int, first: bool) -> None:
    chunks = [value & 63]
    value >>= 6
    while value:
        chunks.append(value & 63)
        value >>= 6
    chunks.reverse()
    for index, chunk in enumerate(chunks):
        out.append(chunk | (64 if index < len(chunks) - 1 else 0) | (128 if first and index == 0 else 0))


def _exception_boundaries(table: bytes) -> set[int]:
    """Every unit the table names: starts, ends and targets."""
    return {unit for start, length, target, _ in _read_exception_table(table)
            for unit in (start, start + length, target)}


def _moved_exception_table(table: bytes, new_start: dict[int, int]) -> bytes:
    out = bytearray()
    for start, length, target, depth_lasti in _read_exception_table(table):
        moved_start = new_start[start]
        for value, first in ((moved_start, True), (new_start[start + length] - moved_start, False),
                             (new_start[target], False), (depth_lasti, False)):
            _write_exception_varint(out, value, first)
    return bytes(out)


# --- the location table (PEP 626): a run of up to 8 units per entry; here only the long, no-column and
# no-location forms are written, which hold any position ---

_Position = tuple[int | None, int | None, int | None, int | None]
_NO_POSITION: _Position = (None, None, None, None)


def _new_positions(code: CodeType, instructions: list[_Instruction], call_units: int) -> list[_Position]:
    old = list(code.co_positions())
    positions: list[_Position] = []
    for ins in instructions:
        own = old[ins.at]
        positions += [own] * (_prefix_units(ins.new_arg) + 1 + _CACHES[ins.op])
        if ins.op == _RESUME:
            positions += [_NO_POSITION] * call_units
    return positions


def _write_varint(out: bytearray, value: int) -> None:
    while value >= 64:
        out.append(64 | (value & 63))
        value >>= 6
    out.append(value)


def _write_signed_varint(out: bytearray, value: int) -> None:
    _write_varint(out, (-value) << 1 | 1 if value < 0 else value << 1)


def _location_table(positions: list[_Position], first_line: int) -> bytes:
    out = bytearray()
    line_before = first_line
    index = 0
    while index < len(positions):
        position = positions[index]
        run = 1
        while run < 8 and index + run < len(positions) and positions[index + run] == position:
            run += 1
        index += run
        line, end_line, column, end_column = position
        if line is None:
            out.append(0x80 | 15 << 3 | (run - 1))
            continue
        if column is None and end_column is None and end_line == line:
            out.append(0x80 | 13 << 3 | (run - 1))
            _write_signed_varint(out, line - line_before)
        else:
            out.append(0x80 | 14 << 3 | (run - 1))
            _write_signed_varint(out, line - line_before)
            _write_varint(out, (end_line if end_line is not None else line) - line)
            _write_varint(out, 0 if column is None else column + 1)
            _write_varint(out, 0 if end_column is None else end_column + 1)
        line_before = line
    return bytes(out)


def _skip_varint(table: bytes, position: int) -> int:
    while table[position] & 64:
        position += 1
    return position + 1


def _entry_end(table: bytes, position: int) -> int:
    """Where the location entry whose header is at `position` ends."""
    kind = (table[position] >> 3) & 15
    position += 1
    if kind == 15:
        return position
    if kind == 14:
        for _ in range(4):
            position = _skip_varint(table, position)
        return position
    if kind == 13:
        return _skip_varint(table, position)
    return position + (2 if kind >= 10 else 1)


def _same_line(table: bytes, position: int, end: int, run: int) -> bytes:
    """The location entry at `position` for `run` units, its line delta made 0 (it follows a part of itself)."""
    kind = (table[position] >> 3) & 15
    header = 0x80 | (run - 1)
    if kind == 15 or kind < 10:
        return bytes((header | kind << 3,)) + table[position + 1:end]
    if kind <= 12:  # the one-line forms: line delta kind - 10, then the columns
        return bytes((header | 10 << 3,)) + table[position + 1:end]
    rest = table[_skip_varint(table, position + 1):end]  # after the line delta: end line and columns (kind 14)
    return bytes((header | kind << 3, 0)) + rest


def _location_table_with_gap(table: bytes, at: int, units: int) -> bytes:
    """The location table with `units` units of no location inserted at unit `at`."""
    gap = bytearray()
    for run in range(units, 0, -8):
        gap.append(0x80 | 15 << 3 | (min(run, 8) - 1))
    position, unit = 0, 0
    while unit < at:
        end, length = _entry_end(table, position), (table[position] & 7) + 1
        if unit + length > at:  # the entry spans the gap: split it around the gap
            before = at - unit
            first = bytes((table[position] & ~7 | (before - 1),)) + table[position + 1:end]
            return table[:position] + first + gap + _same_line(table, position, end, length - before) + table[end:]
        position, unit = end, unit + length
    return table[:position] + bytes(gap) + table[position:]
