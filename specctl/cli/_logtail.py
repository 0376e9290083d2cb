"""Reading a server log that grows, over any transport: `logs` and `logs -f`.

The first read takes the last lines of the file; each later one only the bytes appended since
(`tail -c +OFFSET` through `transport.run`, which the local host and SSH hosts both have), so
following a long log costs what it grew, not its whole length every second.
"""

from __future__ import annotations

from dataclasses import dataclass

from specctl.hosts.transport import Transport

# $1 = file, $2 = lines. The size first, then the last lines of exactly that many bytes, so the
# next read starts where this one ended even while the server writes.
_FIRST = 'size=$(wc -c <"$1") && printf "%s\\n" "$size" && head -c "$size" "$1" | tail -n "$2"'
# $1 = file, $2 = offset. The size first, then the bytes from the offset up to that size.
_NEXT = (
    'size=$(wc -c <"$1") && printf "%s\\n" "$size" && '
    'if [ "$size" -gt "$2" ]; then tail -c +"$(($2 + 1))" "$1" | head -c "$((size - $2))"; fi'
)


@dataclass
class LogTail:
    """One host's log file, read by byte offset; a line is handed out once it is complete."""

    transport: Transport
    path: str
    offset: int | None = None
    partial: bytes = b""

    def read(self, lines: int) -> list[str]:
        """The lines completed since the last read (the first time: the last `lines` lines).
        A file that is missing reads as nothing; one that shrank (replaced) is read from its start."""
        script, arg = (_FIRST, lines) if self.offset is None else (_NEXT, self.offset)
        done = self.transport.run(["sh", "-c", script, "sh", self.path, str(arg)], check=False, retry=True)
        head, _, body = done.out.partition(b"\n")
        if done.rc != 0 or not head.strip().isdigit():
            return []
        size = int(head)
        if self.offset is not None and size < self.offset:
            self.offset, self.partial = 0, b""
            return self.read(lines)
        self.offset = size
        *complete, self.partial = (self.partial + body).split(b"\n")
        return [line.decode(errors="replace") for line in complete]

    def rest(self) -> str | None:
        """A last line without its newline yet, once nothing more will be read."""
        text, self.partial = self.partial, b""
        return text.decode(errors="replace") if text else None
