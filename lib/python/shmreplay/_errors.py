"""The exceptions of shmreplay: one class per error code of the C++ library (``shmreplay::Errc``).

Every class derives from :class:`shmreplay.Error`, and also from the built-in exception a Python user would
reach for first (``FileExistsError`` for a name that exists, ``ValueError`` for bad arguments, ``TimeoutError``
for a wait that ran out, ...), so both ``except shmreplay.AlreadyExists`` and ``except FileExistsError`` work.
The message is the C++ library's: what failed, where, and what was expected versus what was found.
"""


class Error(Exception):
    """Base class of every shmreplay error. ``errc`` names the C++ error code (``shmreplay::Errc``)."""

    errc = "error"


Error.__module__ = "shmreplay"


def _make(name, errc, *bases, doc):
    return type(name, (Error, *bases), {"errc": errc, "__doc__": doc, "__module__": "shmreplay"})


# (class name, Errc name, extra built-in base, doc); the order is the C++ enum's, from 1.
_TABLE = [
    ("InvalidArgument", "invalid_argument", (ValueError,), "A bad name, count, option or array passed by the caller."),
    ("InvalidSchema", "invalid_schema", (ValueError,), "A schema spec that does not parse or does not validate."),
    ("AlreadyExists", "already_exists", (FileExistsError,), "create() of a name that exists, without replace."),
    ("NotFound", "not_found", (FileNotFoundError,), "open() or remove() of a name that does not exist."),
    ("NotASegment", "not_a_segment", (), "The file does not start with shmreplay's magic."),
    ("Truncated", "truncated", (), "The file is shorter than its header says it must be."),
    ("VersionMismatch", "version_mismatch", (), "The segment's layout major version is not this library's."),
    ("NotReady", "not_ready", (), "The creator has not finished initialising the segment."),
    ("Corrupt", "corrupt", (), "The header's sizes, offsets or schema table are inconsistent."),
    ("SchemaMismatch", "schema_mismatch", (ValueError,), "open() with an expected schema that differs."),
    ("NoSpace", "no_space", (), "The shared-memory file system lacks the room for the segment; or a checkpoint's file "
                                "system or quota is full, or the file passed the size limit (RLIMIT_FSIZE)."),
    ("PermissionDenied", "permission_denied", (PermissionError,), "The OS refused access to the segment file, or it belongs to another user."),
    ("SystemFailure", "system", (), "Any other OS error; the message carries errno's text."),
    ("EnvOutOfRange", "env_out_of_range", (IndexError,), "An env id >= num_envs, or negative."),
    ("LeaseHeld", "lease_held", (), "The env (or the learner role) is leased by another live process."),
    ("NotLeased", "not_leased", (), "A push to an env that this Writer does not lease."),
    ("SizeMismatch", "size_mismatch", (ValueError,), "Field data whose dtype, shape or size does not match."),
    ("EmptyView", "empty_view", (), "Sampling a view that holds no steps (or too few, or by priority only steps "
                                    "of priority 0)."),
    ("Timeout", "timeout", (TimeoutError,), "A blocking wait ran out of time."),
    ("Contended", "contended", (), "A sample's rows kept failing their copy (overwritten by writers, or rewritten "
                                   "by learners' updates) and it gave up."),
    ("ReadOnly", "read_only", (), "A writing role on a read-only mapping."),
    ("RateLimited", "rate_limited", (TimeoutError,),
     "The rate limiter held a sample or a waiting writer's push back past its timeout (with timeout 0: not now)."),
]

BY_CODE = [None]
for _name, _errc, _bases, _doc in _TABLE:
    _cls = _make(_name, _errc, *_bases, doc=_doc)
    globals()[_name] = _cls
    BY_CODE.append(_cls)

__all__ = ["Error"] + [row[0] for row in _TABLE]
