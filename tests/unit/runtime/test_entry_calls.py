"""A call at every entry of a function's bytecode (runtime/entry_calls.py Note [A call at every entry])."""

import builtins
import dis
import sys
import traceback

import pytest

from phantora.runtime.entry_calls import rewrite_all, with_entry_calls

NAME = "__phantora_test_entry__"

SOURCE = '''
def plain(x):
    try:
        y = [i * 2 for i in range(x)]
    except TypeError:
        return -1
    return sum(y)

def counting(n):
    for i in range(n):
        yield i

def summing():
    return sum(i for i in counting(3))

def failing(x):
    a = 1
    return a + x  # line 18

async def awaited():
    return 5
'''


@pytest.fixture
def entries(monkeypatch):
    seen: list[str] = []
    monkeypatch.setattr(builtins, NAME, seen.append, raising=False)
    return seen


def load(source: str) -> dict:
    namespace: dict = {}
    exec(rewrite_all(compile(source, "lib.py", "exec"), lambda code: with_entry_calls(code, NAME, code.co_name)),
         namespace)
    return namespace


def test_each_start_and_each_resumption_is_an_entry(entries):
    module = load(SOURCE)
    assert entries == ["<module>"]
    entries.clear()
    assert module["plain"](3) == 6
    assert entries == (["plain", "<listcomp>"] if sys.version_info < (3, 12) else ["plain"])  # 3.12 inlines it
    entries.clear()
    assert list(module["counting"](2)) == [0, 1]
    assert entries == ["counting"] * 3  # the start, a resumption after each yield (as cProfile counts calls)
    entries.clear()
    assert module["summing"]() == 3
    assert entries.count("<genexpr>") == 4 and entries.count("counting") == 4


def test_the_code_behaves_and_reports_as_before(entries):
    module = load(SOURCE)
    assert module["plain"]("x") == -1  # the exception table still finds its handler
    with pytest.raises(TypeError) as raised:
        module["failing"]("y")
    assert traceback.extract_tb(raised.value.__traceback__)[-1].lineno == 18
    coroutine = module["awaited"]()
    with pytest.raises(StopIteration) as finished:
        coroutine.send(None)
    assert finished.value.value == 5


CALL_INSTRUCTIONS = 5 if "PRECALL" in dis.opmap else 4  # the inserted call, after each RESUME


def real_instructions(code, inserted: bool = False) -> list:
    """`code`'s instructions without EXTENDED_ARG and, where `inserted`, without the calls after each RESUME."""
    kept, skip = [], 0
    for ins in dis.get_instructions(code):
        if ins.opname == "EXTENDED_ARG":
            continue
        if skip:
            skip -= 1
            continue
        kept.append(ins)
        if inserted and ins.opname == "RESUME":
            skip = CALL_INSTRUCTIONS
    return kept


def extended_args(code) -> int:
    return sum(ins.opname == "EXTENDED_ARG" for ins in dis.get_instructions(code))


def test_long_jumps_grow_their_extended_arguments(entries):
    grown = 0
    for lines in range(24, 40):  # loop bodies on both sides of a jump of 256 units
        body = "\n".join(f"        total += {i} * x" for i in range(lines))
        source = (f"def loop(n, x):\n    total = 0\n    for _ in range(n):\n        yield total\n{body}\n"
                  "    return total\n")
        plain: dict = {}
        exec(compile(source, "lib.py", "exec"), plain)
        module = load(source)
        assert list(module["loop"](3, 1)) == list(plain["loop"](3, 1))
        rewritten, original = module["loop"].__code__, plain["loop"].__code__
        grown += extended_args(rewritten) > extended_args(original)
        assert [(ins.opname, ins.positions) for ins in real_instructions(rewritten, inserted=True)] == \
            [(ins.opname, ins.positions) for ins in real_instructions(original)]
    assert grown


def code_objects(code):
    yield code
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            yield from code_objects(const)


def instruction_index(code, inserted: bool = False) -> dict[int, int]:
    """Byte offset -> index among `real_instructions`, an EXTENDED_ARG's offset naming the instruction it extends."""
    real = {ins.offset for ins in real_instructions(code, inserted)}
    index, pending, order = {}, [], 0
    for ins in dis.get_instructions(code):
        pending.append(ins.offset)
        if ins.offset in real:
            for offset in pending:
                index[offset] = order
            order, pending = order + 1, []
    return index


@pytest.mark.parametrize("module", ["asyncio.tasks", "collections", "json.decoder", "email._header_value_parser",
                                    "inspect", "typing", "dataclasses", "argparse"])
def test_every_code_object_of_a_module_keeps_its_instructions_positions_jumps_and_handlers(module):
    import importlib.util

    source_file = importlib.util.find_spec(module).origin
    with open(source_file) as source:
        original = compile(source.read(), source_file, "exec")
    for old in code_objects(original):
        new = with_entry_calls(old, NAME, 0)
        assert sum(ins.opname == "RESUME" for ins in dis.get_instructions(new)) == \
            sum(ins.opname == "RESUME" for ins in dis.get_instructions(old))
        old_real, new_real = real_instructions(old), real_instructions(new, inserted=True)
        assert [(i.opname, i.positions) for i in old_real] == [(i.opname, i.positions) for i in new_real], old
        old_index, new_index = instruction_index(old), instruction_index(new, inserted=True)
        for before, after in zip(old_real, new_real):
            if before.opcode in dis.hasjrel:
                assert old_index[before.argval] == new_index[after.argval], (old, before)
        for before, after in zip(dis._parse_exception_table(old), dis._parse_exception_table(new)):
            assert (old_index[before.start], old_index[before.target], before.depth, before.lasti) == \
                (new_index[after.start], new_index[after.target], after.depth, after.lasti), old
