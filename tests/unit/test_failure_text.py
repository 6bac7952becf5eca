"""What a processor says when its query stops: the task's goka error when there is one, else
Spark's first line and the Python exception found inside its message (not only the first
line, which says no more than "an exception was raised by the Python Proxy")."""

from __future__ import annotations

from typing import Any

from goka.spark.summary import translate

SPARK = (
    "[STREAM_FAILED] Query [id = 1] terminated with exception: [FOREACH_BATCH_USER_FUNCTION_"
    "ERROR] An error occurred in the user provided function in foreach batch sink. Reason: An "
    "exception was raised by the Python Proxy. Return Message: Traceback (most recent call "
    'last):\n  File "/x/goka/processing/batch.py", line 3, in <module>\n    import nope\n'
)


def test_a_python_error_inside_sparks_message_is_named() -> None:
    failed = translate(_exception(SPARK + "ModuleNotFoundError: No module named 'nope'\n"
                                  "\tat org.apache.spark.Thing(Thing.scala:1)\n"))  # fmt: skip
    assert str(failed).startswith("[STREAM_FAILED]")
    assert str(failed).endswith("(Python: ModuleNotFoundError: No module named 'nope')")


def test_a_goka_error_is_the_message() -> None:
    failed = translate(_exception(SPARK + "goka.errors.DeliveryError: topic t: refused\n"))
    assert str(failed) == "DeliveryError: topic t: refused" and failed.cause == "DeliveryError"


def test_without_a_python_error_the_first_line_stays() -> None:
    assert str(translate(_exception("[STREAM_FAILED] broken\n\tat x.y(Z.java:1)"))) == (
        "[STREAM_FAILED] broken"
    )


def _exception(text: str) -> Any:
    return RuntimeError(text)
