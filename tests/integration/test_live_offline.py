"""The live acceptance harness (``live/``), run offline so it never rots.

The whole suite runs once against the fake upstream (real relay and fake subprocesses),
with a fake "real" key and an unreachable base URL in the environment: the offline run
must not use either. Every check must pass, the rejected-replay recovery included.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from live import cli, runner
from live.budget import Budget, BudgetExhausted
from live.checks import all_checks
from live.images import COLOURS, WHITE, picture, square_pixels
from live.report import RunReport, render_table
from live.settings import Settings


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory: pytest.TempPathFactory) -> RunReport:
    results = tmp_path_factory.mktemp("live-results")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPENAI_API_KEY", "sk-a-real-key-the-offline-run-must-not-use")
        env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # discard port: unreachable
        env.setenv("DEEPSEEK_API_KEY", "sk-a-real-provider-key-it-must-not-use")
        out = io.StringIO()
        report = runner.run(Settings(offline=True, results_dir=results, seed=20261202), out=out)
    print(out.getvalue())
    return report


def test_every_check_passes_offline(offline_run: RunReport) -> None:
    assert [r.name for r in offline_run.results] == [c.name for c in all_checks()]
    failed = [r for r in offline_run.results if r.status != "passed"]
    assert not failed, render_table(offline_run)
    assert offline_run.budget_stop is None


def test_rejected_replay_is_recovered(offline_run: RunReport) -> None:
    result = offline_run.result("rejected_replay_recovered")
    assert result.status == "passed", result.reason


def test_the_json_summary_accounts_for_every_check(offline_run: RunReport) -> None:
    assert offline_run.json_path is not None
    summary = json.loads(offline_run.json_path.read_text())
    assert summary["mode"] == "offline"
    checks = {c["name"]: c for c in summary["checks"]}
    assert set(checks) == {c.name for c in all_checks()}
    for check in checks.values():
        assert check["request_count"] == len(check["requests"])
        assert check["tokens"] == sum(r["tokens"] for r in check["requests"])
        replay = check["replay"]
        assert replay["accepted_blocks"] <= replay["dispatched_blocks"]
    assert summary["totals"]["requests"] == sum(c["request_count"] for c in checks.values())
    assert summary["totals"]["tokens"] == sum(c["tokens"] for c in checks.values()) > 0
    restart = checks["restart_replay"]
    assert restart["replay"]["dispatched_blocks"] == restart["replay"]["accepted_blocks"] == 1
    assert [r["status"] for r in restart["requests"]] == [200, 200]
    cancelled = next(
        r for r in checks["cancellation_next_turn"]["requests"] if r["label"] == "cancelled"
    )
    assert cancelled["estimated"] and cancelled["tokens"] > 0  # no usage: the upper bound


def test_replay_checks_fail_against_a_relay_that_does_not_replay(tmp_path: Path) -> None:
    only = ("restart_replay", "json_sse_transitions", "tool_chain_single",
            "cursor_screenshot_replay", "cursor_apply_patch_loop")  # fmt: skip
    settings = Settings(
        offline=True,
        results_dir=tmp_path,
        only=only,
        relay_env={"REASONING_CACHE_ENABLED": "0"},
    )
    report = runner.run(settings, out=io.StringIO())
    assert [r.status for r in report.results] == ["failed"] * len(only), render_table(report)
    for result in report.results:
        assert "no cache_plan" in result.reason
    assert not report.ok


def test_the_budget_stops_the_run(tmp_path: Path) -> None:
    only = ("restart_replay", "json_sse_transitions", "isolation")
    settings = Settings(offline=True, results_dir=tmp_path, only=only, max_requests=3)
    report = runner.run(settings, out=io.StringIO())
    assert [r.status for r in report.results] == ["passed", "failed", "not_run"]
    assert "budget" in report.results[1].reason
    assert report.requests == 3
    assert report.budget_stop is not None and not report.ok


def test_the_token_budget_refuses_the_next_request() -> None:
    budget = Budget(max_requests=10, max_tokens=100)
    budget.before_request("first")
    budget.charge_tokens(100)
    with pytest.raises(BudgetExhausted, match="token budget of 100"):
        budget.before_request("second")
    assert budget.requests == 1


def test_record_puts_the_recorder_between_relay_and_upstream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, Path, bool]] = []

    @contextlib.contextmanager
    def recorder(upstream: str, directory: Path, *, shareable: bool) -> Iterator[str]:
        calls.append((upstream, directory, shareable))
        yield upstream.replace("127.0.0.1", "localhost")  # so the relay's banner tells

    monkeypatch.setattr(runner, "load_recorder", lambda: recorder)
    settings = Settings(
        offline=True,
        results_dir=tmp_path / "results",
        only=("restart_replay",),
        record_dir=tmp_path / "cassettes",
        shareable=True,
    )
    report = runner.run(settings, out=io.StringIO())
    assert report.ok, render_table(report)
    [(upstream, directory, shareable)] = calls
    assert upstream.startswith("http://127.0.0.1:") and upstream.endswith("/v1")
    assert directory == tmp_path / "cassettes" and shareable
    assert report.log_dir is not None
    banners = [p.read_text() for p in (report.log_dir / "restart_replay").glob("*.stdout")]
    assert len(banners) == 2 and all("upstream: http://localhost:" in b for b in banners)


def test_without_a_key_the_live_run_is_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([], environ={}) == 0
    assert "skipped: OPENAI_API_KEY is not set" in capsys.readouterr().out


def test_an_unknown_check_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--offline", "--only", "no_such_check"], environ={}) == 2
    assert "no_such_check" in capsys.readouterr().err


# --- the generated images --------------------------------------------------------------


def test_png_holds_exactly_the_square() -> None:
    data = picture("green", "image/png").data
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    length = struct.unpack(">I", data[33:37])[0]
    assert data[37:41] == b"IDAT"
    raw = zlib.decompress(data[41 : 41 + length])
    stride = 1 + 3 * width
    rows = [raw[y * stride + 1 : (y + 1) * stride] for y in range(height)]
    pixels = [[tuple(row[3 * x : 3 * x + 3]) for x in range(width)] for row in rows]
    assert pixels == square_pixels(COLOURS["green"])


def test_jpeg_decodes_to_the_square() -> None:
    rows = _decode_flat_jpeg(picture("red", "image/jpeg").data)
    expected = square_pixels(COLOURS["red"])
    assert len(rows) == len(expected) and len(rows[0]) == len(expected[0])
    for y in (0, 30, 64, 100, 127):
        for x in (0, 23, 24, 64, 103, 104, 127):
            got, want = rows[y][x], expected[y][x]
            assert all(abs(a - b) <= 2 for a, b in zip(got, want, strict=True)), (x, y, got)
    assert expected[0][0] == WHITE


def _decode_flat_jpeg(data: bytes) -> list[list[tuple[int, int, int]]]:
    """A decoder for baseline JPEGs whose blocks carry DC coefficients only, reading the
    file's own quantization and Huffman tables (independent of the writer's)."""
    assert data[:2] == b"\xff\xd8" and data[-2:] == b"\xff\xd9"
    position, tables, quant = 2, {}, 0
    height = width = 0
    while True:
        marker, size = data[position + 1], struct.unpack(">H", data[position + 2 : position + 4])[0]
        payload = data[position + 4 : position + 2 + size]
        position += 2 + size
        if marker == 0xDB:
            quant = payload[1]
            assert set(payload[1:65]) == {quant}
        elif marker == 0xC0:
            _, height, width, count = struct.unpack(">BHHB", payload[:6])
            assert count == 3
        elif marker == 0xC4:
            counts, values = payload[1:17], payload[17:]
            codes, code, index = {}, 0, 0
            for length, n in enumerate(counts, start=1):
                for _ in range(n):
                    codes[(code, length)] = values[index]
                    code, index = code + 1, index + 1
                code <<= 1
            tables[payload[0] >> 4] = codes
        elif marker == 0xDA:
            break
    scan = data[position:-2].replace(b"\xff\x00", b"\xff")
    bits = "".join(f"{byte:08b}" for byte in scan)
    cursor = 0

    def symbol(table: dict[tuple[int, int], int]) -> int:
        nonlocal cursor
        for length in range(1, 17):
            key = (int(bits[cursor : cursor + length], 2), length)
            if key in table:
                cursor += length
                return table[key]
        raise AssertionError("no Huffman code matches")

    blocks, previous = [], [0, 0, 0]
    for _ in range((height // 8) * (width // 8)):
        levels = []
        for component in range(3):
            category = symbol(tables[0])
            diff = 0
            if category:
                raw = int(bits[cursor : cursor + category], 2)
                cursor += category
                diff = raw if raw >> (category - 1) else raw - (1 << category) + 1
            previous[component] += diff
            assert symbol(tables[1]) == 0x00  # end of block: no AC coefficients
            levels.append(previous[component] * quant / 8 + 128)
        y, cb, cr = levels
        rgb = (y + 1.402 * (cr - 128), y - 0.344136 * (cb - 128) - 0.714136 * (cr - 128),
               y + 1.772 * (cb - 128))  # fmt: skip
        red, green, blue = (max(0, min(255, round(v))) for v in rgb)
        blocks.append((red, green, blue))
    per_row = width // 8
    return [[blocks[(y // 8) * per_row + x // 8] for x in range(width)] for y in range(height)]


def test_the_cache_ab_reports_both_arms(offline_run: RunReport) -> None:
    result = offline_run.result("cache_ab")
    assert result.status == "passed", result.reason
    shares = {
        arm: float(share)
        for arm, share in re.findall(
            r"cache (on|off): cached ([0-9.]+)% of \d+ input", result.reason
        )
    }
    assert set(shares) == {"on", "off"}
    assert shares["on"] > shares["off"] > 0  # the off arm still hits its instructions
    assert len(re.findall(r"reasoning [1-9]\d*, output [1-9]\d*, [0-9.]+ s", result.reason)) == 2
