"""bench/codemem_files.py: the files in play of a codemem file, ranked offline by the product."""
import json
import subprocess
import sys

from support import ROOT, shared_path

HOME = "/Users/dev/shop"


def at(day, clock):
    return f"2025-09-0{day}T{clock}Z"


def said(day, clock, kind, text):
    return {"t": at(day, clock), "type": kind, "text": text}


def read(day, clock, path, name="Read", output="x = 1"):
    return {"t": at(day, clock), "type": "tool_use", "id": f"toolu_{day}{clock}", "name": name,
            "input": {"file_path": f"{HOME}/{path}"}, "output": output, "is_error": False, "sidechain": False,
            "started": at(day, clock)}


def test_the_files_a_prompt_is_about_are_ranked_though_others_were_touched_since(tmp_path):
    """The cart was worked on first, five other files after: the next session's prompt on the cart
    finds it among the five, the five files touched last do not hold it."""
    shared_path("bench", "codemem", "run.py")
    others = ("auth", "db", "ui", "log", "cfg")
    first = [said(1, "10:00:00", "user_prompt", "the cart total ignores the discount"),
             read(1, "10:01:00", "src/cart.py", output="def total(items):\n    return sum(items)"),
             read(1, "10:02:00", "src/cart.py", name="Edit"),
             said(1, "10:03:00", "assistant_final", "The cart total now applies the discount."),
             said(1, "11:00:00", "user_prompt", "now tidy the rest of the app")]
    first += [read(1, f"11:0{i + 1}:00", f"src/{name}.py") for i, name in enumerate(others)]
    second = [said(2, "10:00:00", "user_prompt", "the cart total is wrong again with two discounts"),
              read(2, "10:01:00", "src/cart.py")]
    sessions = [{"id": f"s{day}", "start": at(day, "09:00:00"), "end": at(day, "18:00:00"), "cwd": HOME, "events": ev}
                for day, ev in ((1, first), (2, second))]
    data = {"format": "codemem-1", "projects": [{"id": "dev/shop", "root": HOME, "source": "test", "sessions": sessions,
                                                 "known_files": ["src/cart.py"] + [f"src/{n}.py" for n in others]}]}
    path = tmp_path / "codemem.json"
    path.write_text(json.dumps(data))
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "codemem_files.py"), "--data", str(path), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["all"] == {"prompts": 1, "product": 1.0, "recent_files": 0.0}
