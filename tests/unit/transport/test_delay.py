"""The debug delays: off by default, seeded per role when asked."""

import pytest

from phantora.transport.delay import DELAY_ENV_VAR, SEED_ENV_VAR, RandomDelay


def draws(role: str, n: int = 5) -> list[float]:
    delay = RandomDelay.from_env(role)
    assert delay is not None
    return [delay.next_s() for _ in range(n)]


def test_off_by_default(monkeypatch):
    monkeypatch.delenv(DELAY_ENV_VAR, raising=False)
    assert RandomDelay.from_env("server") is None


def test_a_seed_replays_each_roles_delays(monkeypatch):
    monkeypatch.setenv(DELAY_ENV_VAR, "2")
    monkeypatch.setenv(SEED_ENV_VAR, "7")
    assert draws("rank 3") == draws("rank 3") != draws("rank 4")
    assert all(0 <= d <= 0.002 for d in draws("server"))
    monkeypatch.delenv(SEED_ENV_VAR)
    assert draws("rank 3") != draws("rank 3")  # from the OS's entropy


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_bad_value_is_an_error(monkeypatch, value):
    monkeypatch.setenv(DELAY_ENV_VAR, value)
    with pytest.raises(ValueError, match=DELAY_ENV_VAR):
        RandomDelay.from_env("rank 0")
