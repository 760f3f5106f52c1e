"""The package's typed exceptions; the native module raises these."""

from __future__ import annotations


class Error(Exception):
    """Any error of safetensors_stream.

    Attributes:
        kind: the rule broken, as the library names it ("tensor_too_short", "io", ...).
        input: the input the error is about, if it is about an input.
        output: the output the error is about (a full disk, a bad name), if any.
        tensor: the tensor the error is about, if known.
        offset: the byte offset in the input where the problem is, if known.
    """

    def __init__(
        self,
        message: str,
        kind: str = "",
        input: str | None = None,
        tensor: str | None = None,
        offset: int | None = None,
        output: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.input = input
        self.tensor = tensor
        self.offset = offset
        self.output = output


class BadInputError(Error):
    """The input is not what it claims to be (the CLI's exit code 1)."""


class UsageError(Error):
    """The request itself is wrong: a bad argument, conflicting names (exit code 2)."""


class EnvironmentIOError(Error, OSError):
    """The environment failed: I/O, permissions, disk full (exit code 3).

    An ``OSError`` too, so ``except OSError`` catches it; ``sts.IOError`` is
    the same class under its first name (not exported by ``import *``, where
    it would shadow the built-in)."""

    def __init__(
        self,
        message: str,
        kind: str = "",
        input: str | None = None,
        tensor: str | None = None,
        offset: int | None = None,
        output: str | None = None,
    ) -> None:
        # OSError's own constructor would read (errno, strerror) from the
        # arguments: set the message alone, then the fields.
        Error.__init__(self, message, kind, input, tensor, offset, output)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


IOError = EnvironmentIOError  # noqa: A001 - the 0.1 name, kept for compatibility
