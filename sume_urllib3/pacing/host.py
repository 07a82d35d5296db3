"""HostFleet: one pace, one cooldown and one retry budget per API key for every process on a host.

Each transaction: ``BEGIN IMMEDIATE``, read the key's state, run the core, write it back,
``COMMIT``. Why SQLite rather than a memory-mapped file under ``fcntl`` locks:
a transaction is atomic when a process is SIGKILLed halfway through a write (a torn record in
a mapped file would need checksums and a recovery of its own), a key's state may grow (every
attempt in flight under a quota reading holds an entry), a corrupt file is detected rather than
read as numbers, a lock taken says so at once (``SQLITE_BUSY``, polled with a bound), and the
size bound is one pragma (``max_page_count``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import re
import stat
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple, TypeVar, Union

if TYPE_CHECKING:  # at run time sqlite3 is imported by the functions that use it, when first used
    import sqlite3

from .._config import check_int
from .._errors import ConfigurationError
from . import _core as _pacing
from ._fleet import RetryBudget, StoreFleet, check_name, shared_monotonic

log = logging.getLogger("sume_urllib3")
_T = TypeVar("_T")

#: The default ``max_size`` (bytes): about 50,000 keys' state (some 300 bytes each). The
#: write-ahead log beside it is checkpointed every 1,000 pages and cut back to :data:`WAL_LIMIT`.
MAX_SIZE = 16 * 1024 * 1024
WAL_LIMIT = 4 * 1024 * 1024
#: The default ``timeout`` (seconds): how long an acquire waits for the file's lock before
#: pacing locally instead. A transaction is short, but many processes' threads taking turns on
#: a loaded machine queue for it far longer: RedisFleet's 0.05 s would fail open needlessly.
TIMEOUT = 0.2
#: How long a thread waits (seconds) for another thread of its process to finish with the
#: file, before pacing locally: that wait is queueing inside the process, not the file's lock.
QUEUE_TIMEOUT = 1.0
#: ``HostFleet(app=...)``: a file name's worth of letters, digits and ``_.-``.
APP = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

_MIN_SIZE = 64 * 1024
_MAX_SIZE = 1 << 40
_CLIENT_WINDOW = 60 * _pacing.SECOND  # a process that used the file within this long still shares it
# Polling the file's lock: the first pause and the longest (seconds).
_FIRST_PAUSE, _MAX_PAUSE = 2e-5, 5e-4
_MAX_OPEN = 10_000  # keys a process remembers as open at most (past it, it starts the list afresh)
_CLIENT_EVERY = _pacing.SECOND  # how often a process stamps itself as a client of the file
# How often (real seconds) a process looks whether its file was deleted or replaced (at logout,
# $XDG_RUNTIME_DIR goes with it): then it opens the file at its path again.
_CHECK_EVERY = 1.0
# When the file is full, the least recently used share of its keys that leaves it.
_EVICT_SHARE = 4
# The core's state, field by field: the file stores it as a JSON list in this order, and the
# layout's hash prefixes every key, so two versions of the state never read each other's rows
# (during a rolling upgrade each keeps keys of its own, as RedisFleet's "v2" does).
_DEFAULTS = vars(_pacing.State())  # the fields in declaration order, and their defaults
_NAMES = tuple(_DEFAULTS)
_LAYOUT = hashlib.sha256(",".join(_NAMES).encode()).hexdigest()[:8]
# The types each field's value may have in the file (a float field may read back as an int).
_TYPES = tuple((float, int) if isinstance(v, float) else (type(v),) for v in _DEFAULTS.values())


def encode_state(st: _pacing.State) -> str:
    """One key's state as the file stores it: its fields' values in declaration order, as JSON."""
    return json.dumps([getattr(st, name) for name in _NAMES], separators=(",", ":"))


def decode_state(text: str) -> Optional[_pacing.State]:
    """The state ``encode_state`` wrote, or None for text that is not one (a damaged row)."""
    try:
        values = json.loads(text)
    except ValueError:
        return None
    # type() rather than isinstance(): a bool is not a number here.
    if type(values) is not list or len(values) != len(_NAMES):
        return None
    for value, types in zip(values, _TYPES):
        if type(value) not in types:
            return None
        if type(value) is dict and not all(type(v) is int for v in value.values()):
            return None
    return _pacing.State(*values)


def default_app() -> str:
    """This deployment's name for its file: its working directory's name and a hash of it and of
    the Python environment. Every process of one deployment (gunicorn's workers, a Celery worker
    started from the same project and virtualenv) computes the same; another project does not."""
    cwd = os.getcwd()
    digest = hashlib.sha256(f"{sys.prefix}\0{cwd}".encode("utf-8", "surrogatepass")).hexdigest()[:12]
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.basename(cwd) or "root")[:40]
    return f"{name}-{digest}"


def _user() -> str:
    getuid = getattr(os, "getuid", None)
    if getuid is not None:
        return str(getuid())
    import getpass  # Windows: no uid

    return re.sub(r"[^A-Za-z0-9_.-]", "_", getpass.getuser())[:40]


def default_path(app: Optional[str] = None) -> str:
    """Where ``HostFleet(path=None)`` keeps its state: ``$XDG_RUNTIME_DIR/sume_urllib3/<app>.fleet``
    when that directory is set (the user's own, emptied at logout and reboot), else
    ``<temp dir>/sume_urllib3-<uid>/<app>.fleet`` (docs/guide/pacing.md); with no usable temp dir
    (a read-only root), ``/tmp``, where the fleet fails open as for any unwritable file."""
    name = default_app() if app is None else check_name(app, "app", APP, "_.-")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        directory = os.path.join(runtime, "sume_urllib3")
    else:
        try:
            import tempfile

            temp = tempfile.gettempdir()
        except FileNotFoundError:  # "no usable temporary directory"
            temp = os.path.join(os.sep, "tmp")
        directory = os.path.join(temp, f"sume_urllib3-{_user()}")
    return os.path.join(directory, f"{name}.fleet")


def _private_directory(directory: str) -> None:
    """Make the default path's directory (mode 0700); refuse one another user could write to."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"{directory} is not a directory")
    getuid = getattr(os, "getuid", None)
    if getuid is not None and (info.st_uid != getuid() or info.st_mode & 0o022):
        # Another user could swap the file for one of theirs: pace locally instead.
        raise PermissionError(f"{directory} belongs to another user or others may write to it")


def _same_boot(db: sqlite3.Connection) -> bool:
    """The file was written since the host last booted: a reboot restarted the monotonic clock every
    state is written on."""
    row = db.execute("SELECT value FROM meta WHERE name = 'boot'").fetchone()
    return row is not None and row[0] == _boot_id()


def _boot_id() -> str:
    """What changes when the host reboots (and the monotonic clock starts again), if readable."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


class HostFleet(StoreFleet):
    """A Fleet whose state lives in a local file, so every process on one host paces together.

    The rules are :class:`LocalFleet`'s, run on state kept in an SQLite file in WAL mode;
    docs/guide/pacing.md ("Many processes on one host") says when to use it, where the file is,
    what a turn costs and how it fails open (as every shared :class:`StoreFleet`, with
    ``backoff`` and ``max_backoff``). ``path`` (None: :func:`default_path` of ``app``, which
    names the default path: give one or the other); ``timeout`` seconds for the file's lock
    before pacing locally; ``ttl`` seconds unused before a key leaves the file; ``max_size``
    bytes the file never grows past (:data:`MAX_SIZE`). ``rate``, ``burst``,
    ``initial_window``, ``clock`` (one clock for the whole host), ``wall`` and ``rng`` as for
    :class:`LocalFleet`; ``retry_budget`` applies a budget per key host-wide. A file deleted or
    replaced is noticed within a second of use (one WARNING, counted in ``errors``). Pickling
    keeps the configuration only.
    """

    _scope = "host-wide"
    # The parent's connections, none before the first process's (see _after_fork).
    _db: Optional[sqlite3.Connection] = None
    _opening: Optional[sqlite3.Connection] = None  # made, the file not yet set up

    def __init__(
        self,
        path: Optional[str] = None,
        *,
        rate: Union[str, float, None] = None,
        burst: Optional[int] = None,
        app: Optional[str] = None,
        timeout: float = TIMEOUT,
        initial_window: int = 4,
        retry_budget: Optional[RetryBudget] = None,
        ttl: float = 3600.0,
        max_size: int = MAX_SIZE,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        clock: Callable[[], float] = shared_monotonic,
        wall: Callable[[], float] = time.time,
        rng: Union[random.Random, Callable[[], float], None] = None,
    ) -> None:
        if path is not None and (not isinstance(path, (str, os.PathLike)) or not os.fspath(path)):
            raise ConfigurationError(f"path must be a file path or None, got {type(path).__name__}")
        if app is not None and path is not None:
            raise ConfigurationError("give path or app, not both (app names the default path)")
        # The app's name stays this one's when the default path is looked up again (cwd may move).
        self._given_path, self._app = path is not None, default_app() if app is None else app
        self._path = os.path.abspath(os.fspath(path)) if path is not None else default_path(app)
        self._max_size = check_int(max_size, "max_size", _MIN_SIZE, _MAX_SIZE)  # bytes
        # A pickled copy uses the file itself: elsewhere, another working directory names another.
        settings = dict(path=self._path, rate=rate, burst=burst, app=None, timeout=timeout,
                        initial_window=initial_window, retry_budget=retry_budget, ttl=ttl, max_size=max_size,
                        backoff=backoff, max_backoff=max_backoff)
        super().__init__(settings, clock=clock, wall=wall, rng=rng)
        self._ttl_us = round(self._ttl * _pacing.SECOND)

    def _after_fork(self) -> None:
        """This process's connection (opened at first use), its lock and open keys."""
        super()._after_fork()
        for db in (self._db, self._opening):
            if db is not None:
                # Never closed nor collected in the child: closing the parent's SQLite connection
                # here could checkpoint and remove the write-ahead log the parent still uses.
                _inherited.append(db)
        self._db_lock = threading.Lock()  # this process's connection (a child's: new, never the parent's)
        self._db = self._opening = None
        self._identity: Optional[Tuple[int, int]] = None  # the file's device and inode when opened
        self._check_at = 0.0  # time.monotonic() from which the next use looks at the file again
        self._client_at = -_CLIENT_EVERY  # the file clock when this process last stamped itself
        self._sweep_at = 0
        # Keys this process last saw open: the file's data_version then, and when (the file clock).
        self._open: Dict[str, Tuple[int, int]] = {}

    # -- the store: a transaction on the file ---------------------------------------------------

    # -- configuration ----------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The file that holds the state (its ``-wal`` and ``-shm`` files sit beside it)."""
        return self._path

    @property
    def max_size(self) -> int:
        """Bytes the file never grows past."""
        return self._max_size

    @property
    def entries(self) -> int:
        """Keys the file holds state for now (0 when it cannot be read)."""
        try:
            with self._locked() as db:
                row = db.execute("SELECT COUNT(*) FROM keys").fetchone()
            return int(row[0])
        except Exception:
            return 0

    def reset(self) -> None:
        """Forget every key's cooldown, pace and turns, for every process using the file, and this
        process's outage (tests: ``sume_urllib3.pacing.reset_fleets()`` resets every fleet)."""
        super().reset()
        try:
            with self._locked() as db:
                db.execute("DELETE FROM keys")
                self._open.clear()
        except Exception as exc:
            self._failed(exc)

    def __repr__(self) -> str:
        rate = "learned" if self._rate is None else f"{self._rate:g}/s burst {self._burst}"
        return f"HostFleet({self._path!r}, pace={rate})"

    def _store_name(self) -> str:
        return f"host fleet file {self._path}"

    def _failed(self, exc: BaseException) -> None:
        import sqlite3
        super()._failed(exc)
        self._check_at = 0.0  # a deleted file may be why: the next use looks
        if isinstance(exc, sqlite3.OperationalError) and "full" in str(exc):
            self._shed()  # a full file makes room: its least recently used keys go

    # -- the file ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        """This process's connection under the fleet's thread lock.

        Threads of one process take turns on its connection: waiting for a turn is queueing behind
        this process's own work, not a file another process holds (failing open would only pace
        this process worse), so the wait is bounded by QUEUE_TIMEOUT rather than ``timeout``.
        """
        limit = max(self._timeout, QUEUE_TIMEOUT)
        if not self._db_lock.acquire(timeout=limit):
            raise TimeoutError(f"another thread held the host fleet past {limit:g}s")
        try:
            yield self._connection()
        finally:
            self._db_lock.release()

    def _connection(self) -> sqlite3.Connection:
        """This process's connection, opened (and the file made and set up) at first use.

        Called under the fleet's lock, so the set-up is tried once: a file another process holds
        answers SQLITE_BUSY, and the transaction's polling tries again, outside the lock, on the
        same connection. Nothing sleeps under the lock: in a gevent worker it may be a real one
        (made at the fork, before gevent patched), and a greenlet sleeping under it would stop
        every other.
        """
        import sqlite3
        if self._db is not None and time.monotonic() >= self._check_at:
            self._check_at = time.monotonic() + _CHECK_EVERY
            if _identity(self._path) != self._identity:
                self._reopen(self._db)
        if self._db is None:
            if self._opening is None:
                self._opening, self._identity = _connect(self._path, self._given_path), _identity(self._path)
            try:
                _set_up(self._opening, self._max_size)
            except BaseException as exc:
                if not (isinstance(exc, sqlite3.OperationalError) and _busy(exc)):
                    self._opening.close()  # this process's own, just opened: safe to close
                    self._opening = None
                raise
            self._db, self._opening = self._opening, None
        return self._db

    def _reopen(self, old: sqlite3.Connection) -> None:
        """The file was deleted or replaced: say so, count it, and let the next use open the path."""
        import sqlite3
        with self._lock:
            self._errors += 1
        self._db = None
        self._open.clear()
        if not self._given_path:  # its directory may be gone with $XDG_RUNTIME_DIR: look again
            self._path = self._settings["path"] = default_path(self._app)
        log.warning("host fleet file deleted or replaced; opening %s again", self._path)
        with contextlib.suppress(sqlite3.Error):
            old.close()  # ours; SQLite neither checkpoints nor deletes the WAL of a moved file

    def _transact(self, kid: str, rule: Callable[..., Any], **args: Any) -> Any:
        """Run ``rule`` on one key's state inside the file's write lock, and store what it left."""
        key = f"{_LAYOUT}:{kid}"

        def attempt() -> Any:
            with self._locked() as db:
                with _writing(db):
                    # The clock is read under the lock: every process's writes see time move forward.
                    now = self._now()
                    row = db.execute("SELECT state FROM keys WHERE kid = ?", (key,)).fetchone()
                    # A damaged row starts afresh (as _core does a state from a clock ahead).
                    st = (decode_state(row[0]) if row is not None else None) or _pacing.State()
                    result = rule(st, self._config, now, **args)
                    db.execute("INSERT OR REPLACE INTO keys VALUES (?, ?, ?)", (key, encode_state(st), now))
                    if rule is _pacing.acquire:
                        self._housekeeping(db, now)
                self._saw(db, kid, st, now)
                return result

        # A process's first use sets the file up, and may wait longer than a transaction: every
        # worker of a deployment opens the file at its first request, at once.
        limit = self._timeout if self._db is not None else max(self._timeout, QUEUE_TIMEOUT)
        return _while_busy(attempt, limit)

    def _saw(self, db: sqlite3.Connection, kid: str, st: _pacing.State, now: int) -> None:
        """Remember a key left open (and the file's data_version then): the next acquire may skip
        the transaction while no process writes to the file."""
        import sqlite3
        self._open.pop(kid, None)
        if _pacing.is_open(st, self._config, now):
            if len(self._open) >= _MAX_OPEN:
                self._open.clear()
            # Committed: an error now must not run the step again (the caller retries on busy);
            # the key is then asked about in a transaction next time. Our own commits leave
            # data_version as it is: it moves when another process writes.
            with contextlib.suppress(sqlite3.Error):
                self._open[kid] = (db.execute("PRAGMA data_version").fetchone()[0], now)

    def _is_open(self, kid: str) -> bool:
        """Whether a key seen open still is: no process wrote to the file since (and the sighting
        is younger than ttl / 4, so a key used only this way still has its row refreshed)."""
        try:
            with self._locked() as db:
                seen = self._open.get(kid)  # again under the lock: another thread may have closed it
                if seen is not None:
                    (version,) = db.execute("PRAGMA data_version").fetchone()
                    if version == seen[0] and self._now() - seen[1] < self._ttl_us // 4:
                        return True
                self._open.pop(kid, None)
        except Exception:  # the transaction that follows meets the same trouble and fails open
            self._open.pop(kid, None)
        return False

    def _snapshot(self) -> Tuple[List[Tuple[str, _pacing.State]], int]:
        """Every key's state in the file, read in one read-only transaction (in WAL mode a reader
        and a writer never wait for each other)."""
        import pathlib
        import sqlite3

        if not os.path.exists(self._path):
            raise FileNotFoundError(f"no host fleet file at {self._path}")
        # mode=ro: this connection never writes, so it never takes the write lock nor checkpoints.
        db = sqlite3.connect(pathlib.Path(self._path).as_uri() + "?mode=ro", uri=True, timeout=1.0)
        try:
            same_boot = _same_boot(db)
            rows = db.execute("SELECT kid, state FROM keys").fetchall()
        finally:
            db.close()
        if not same_boot:
            return [], self._now()  # written before a reboot: the next writer drops it
        prefix = _LAYOUT + ":"
        decoded = [(kid[len(prefix) :], decode_state(text)) for kid, text in rows if kid.startswith(prefix)]
        return [(kid, st) for kid, st in decoded if st is not None], self._now()

    def _housekeeping(self, db: sqlite3.Connection, now: int) -> None:
        """Stamp this process as a client (once a second) and sweep idle keys (every ttl / 4)."""
        if now - self._client_at >= _CLIENT_EVERY:
            self._client_at = now
            db.execute("INSERT OR REPLACE INTO clients VALUES (?, ?)", (self._client_id, now))
            recent = db.execute("SELECT COUNT(*) FROM clients WHERE seen > ?", (now - _CLIENT_WINDOW,))
            self._clients = max(1, int(recent.fetchone()[0]))
        if now >= self._sweep_at:
            self._sweep_at = now + self._ttl_us // 4
            db.execute("DELETE FROM keys WHERE seen < ?", (now - self._ttl_us,))
            db.execute("DELETE FROM clients WHERE seen < ?", (now - _CLIENT_WINDOW,))

    def _shed(self) -> None:
        """A full file: the least recently used quarter of its keys leaves it, so it serves again."""
        try:
            with self._locked() as db, _writing(db):
                (count,) = db.execute("SELECT COUNT(*) FROM keys").fetchone()
                db.execute(
                    "DELETE FROM keys WHERE kid IN (SELECT kid FROM keys ORDER BY seen LIMIT ?)",
                    (max(1, count // _EVICT_SHARE),),
                )
                db.execute("DELETE FROM clients WHERE seen < ?", (self._now() - _CLIENT_WINDOW,))
        except Exception:
            log.debug("shedding keys from a full host fleet file failed", exc_info=True)


def _identity(path: str) -> Optional[Tuple[int, int]]:
    """The device and inode of the file at ``path`` (None: there is none)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _connect(path: str, given: bool) -> sqlite3.Connection:
    """A connection to the file, made here (mode 0600) if new; set up by :func:`_set_up`."""
    import sqlite3
    directory = os.path.dirname(path)
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    if given:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    else:
        _private_directory(directory)
        # In our own directory the file is never a link (a path you give may be one).
        flags |= getattr(os, "O_NOFOLLOW", 0)
    # Created here, not by SQLite, so it is 0600 whatever the umask; SQLite gives its -wal and
    # -shm files the mode of the database file.
    try:
        fd = os.open(path, flags | os.O_EXCL, 0o600)
    except FileExistsError:
        fd = os.open(path, flags, 0o600)
    else:  # new: a -shm beside it is a deleted file's, still mapped by a process that used that one
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + "-shm")  # (SQLite removes the -wal of an empty file itself)
    os.close(fd)
    # isolation_level None: the transactions are ours (BEGIN IMMEDIATE takes the write lock at
    # once, so two processes never both read a state and then race to write it).
    # timeout 0: no SQLite busy handler, ever. It waits for a lock by sleeping inside C, where
    # a gevent hub cannot switch, and it answers a change of journal mode that meets a lock with
    # SQLITE_BUSY at once anyway: the lock is polled (HostFleet._transact), the set-up included.
    return sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)


def _set_up(db: sqlite3.Connection, max_size: int) -> None:
    """WAL, the size bound and the tables, on a connection of its own (repeatable: every step
    leaves the file as it found it or set up, so a try that met the lock is simply made again)."""
    import sqlite3
    mode = db.execute("PRAGMA journal_mode=WAL").fetchone()
    if mode is None or str(mode[0]).lower() != "wal":
        raise sqlite3.OperationalError(f"cannot use WAL mode here (got {mode!r})")
    # The state is worth nothing after a power loss (clocks restart too): no fsync per write.
    db.execute("PRAGMA synchronous=OFF")
    (page_size,) = db.execute("PRAGMA page_size").fetchone()
    db.execute(f"PRAGMA max_page_count={max(16, max_size // int(page_size))}")
    db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT}")
    with _writing(db):
        for statement in _SCHEMA:
            db.execute(statement)
        if not _same_boot(db):
            db.execute("DELETE FROM keys")
            db.execute("DELETE FROM clients")
            db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('boot', ?)", (_boot_id(),))


# The tables: ``keys`` (a key's state, and when it was last written on the file's clock, for the
# sweep), ``clients`` (the processes using the file lately, to share a rate while it fails), ``meta``.
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS keys (kid TEXT PRIMARY KEY, state TEXT NOT NULL, seen INTEGER NOT NULL)"
    " WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS keys_seen ON keys (seen)",
    "CREATE TABLE IF NOT EXISTS clients (id TEXT PRIMARY KEY, seen INTEGER NOT NULL) WITHOUT ROWID",
)


def _while_busy(attempt: Callable[[], _T], timeout: float) -> _T:
    """``attempt()``, tried again while the file's lock is taken, for at most ``timeout`` seconds;
    then ``database is locked`` is raised (and the caller fails open). The lock is polled with
    short pauses (_FIRST_PAUSE doubling to _MAX_PAUSE), not left to SQLite's busy handler, whose
    sleeps of whole milliseconds would hold every process sharing the file."""
    import sqlite3
    deadline = 0.0
    pause = _FIRST_PAUSE
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
        now = time.monotonic()  # real time: how long this process has waited, whatever the fleet's clock
        if not deadline:
            deadline = now + timeout
        elif now >= deadline:
            raise sqlite3.OperationalError(f"database is locked (for {timeout:g}s)")
        time.sleep(min(pause, deadline - now))  # looked up now: gevent's when it is patched
        pause = min(pause * 2, _MAX_PAUSE)


def _busy(exc: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY: another connection holds the lock (Python 3.8 has no error code: the message)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return bool(code & 0xFF == 5)  # SQLITE_BUSY and its extended codes
    return "locked" in str(exc) or "busy" in str(exc)


@contextlib.contextmanager
def _writing(db: sqlite3.Connection) -> Iterator[None]:
    """One transaction that takes the file's write lock at once (BEGIN IMMEDIATE: two processes
    never both read a state and then race to write it), rolled back on any error."""
    import sqlite3
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):  # the transaction may be gone with its error
            if db.in_transaction:
                db.execute("ROLLBACK")
        raise


# Connections a fork's child inherited: kept referenced so they are never closed there.
_inherited: List[sqlite3.Connection] = []


__all__ = ["MAX_SIZE", "HostFleet", "decode_state", "default_app", "default_path", "encode_state"]
