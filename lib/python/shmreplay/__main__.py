"""``python -m shmreplay ARGS``: the ``shmreplay`` CLI that came with this package (the same program as the
``shmreplay`` command of the environment), for when the environment's bin directory is not on PATH."""
import os
import sys


def cli_path():
    """The path of the ``shmreplay`` executable installed with this package (from the wheel's file list)."""
    try:
        from importlib.metadata import PackageNotFoundError, files
        try:
            for f in files("shmreplay") or ():
                if f.name == "shmreplay" and f.parent.name in ("bin", "scripts"):
                    path = str(f.locate())
                    if os.access(path, os.X_OK):
                        return path
        except PackageNotFoundError:
            pass
    except ImportError:  # pragma: no cover (Python < 3.8)
        pass
    here = os.path.join(os.path.dirname(sys.executable), "shmreplay")
    if os.access(here, os.X_OK):
        return here
    raise SystemExit("shmreplay: the CLI executable was not found next to this Python package; "
                     "install the package with pip (pip install <clone> or pip install shmreplay)")


def main():
    path = cli_path()
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
