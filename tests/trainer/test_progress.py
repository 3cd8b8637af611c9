"""The progress bar (trainer/progress.py): no speed or ETA before one is measured, ended before other lines
and only once."""

import io

from agents_operator.trainer.progress import Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_no_speed_and_no_eta_before_one_is_measured():
    out = Terminal()
    bar = Progress(16384, out)
    bar.update(0, None, 0.0)
    assert "ETA" not in out.getvalue() and "steps/s" not in out.getvalue()
    bar.update(8192, -900.0, 4096.0)
    assert "4.1k steps/s  ETA 0m02s" in out.getvalue()


def test_the_bar_is_ended_before_other_lines_and_only_once():
    out = Terminal()
    bar = Progress(100, out)
    bar.update(50, None, 10.0)
    text = bar._text
    bar.say("worker-1 exited with code 0")
    assert out.getvalue().endswith(f"\r\x1b[Kworker-1 exited with code 0\n{text}")
    bar.close()
    bar.close()
    assert out.getvalue().endswith(f"{text}\n")
