"""gflags' spellings for the command line, as Caffe's tools accept them.

gflags takes a flag with one dash or two, its value after ``=`` or as the next
argument (``-solver s.prototxt``, ``-solver=s.prototxt``, ``--solver s.prototxt``,
``--solver=s.prototxt``), booleans bare, negated with ``no`` or with a value
(``-gray``, ``-nogray``, ``-gray=false``), flags before or after the positional
arguments, and ``--`` to end the flags.  :func:`normalize` rewrites such an argument
list into the ``--name=value`` form argparse reads, from the options an argparse
parser declares (so each command accepts exactly its own flags, in every
spelling); :func:`hoist` moves flags given before the command after it.
"""
import argparse

_TRUE = ("true", "t", "yes", "y", "1")
_FALSE = ("false", "f", "no", "n", "0")


class FlagError(Exception):
    """A flag gflags would refuse (unknown, missing its value, a bad boolean)."""


def _is_bool(action):
    return isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))


def _options(parser):
    """{name without dashes: action} for every option of ``parser`` (both dash styles,
    underscores and hyphens alike)."""
    out = {}
    for action in parser._actions:
        for s in action.option_strings:
            name = s.lstrip("-")
            out.setdefault(name, action)
            out.setdefault(name.replace("-", "_"), action)
            out.setdefault(name.replace("_", "-"), action)
    return out


def _long(action):
    """The option string argparse is given back: the longest one."""
    return max(action.option_strings, key=len)


def _is_flag(token):
    return token.startswith("-") and token != "-" and not _is_number(token)


def _is_number(token):
    try:
        float(token)
    except ValueError:
        return False
    return True


def _bool_value(name, value):
    v = value.lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise FlagError("illegal value '%s' specified for bool flag '%s'" % (value, name))


def normalize(argv, parser):
    """``argv`` (the arguments after the command) in the form argparse reads, for the
    options ``parser`` declares: every flag as ``--name=value`` (short options argparse
    knows, ``-v`` or ``-o FILE``, as given), then the positional arguments in their
    order (after ``--`` when one starts with a dash).  A positional of variable length
    (``nargs`` REMAINDER, ``*`` or ``+``: a script's own arguments, say) takes the rest
    of ``argv`` untouched, from its first argument on; so does a short option of nargs
    REMAINDER (``run -m MODULE ARGS...``), from the option on."""
    opts = _options(parser)
    short = {s: a for a in parser._actions for s in a.option_strings if len(s) == 2}
    positional_actions = [a for a in parser._actions if not a.option_strings]
    rest_at = next((i for i, a in enumerate(positional_actions) if a.nargs in (argparse.REMAINDER, "*", "+")),
                   None)
    flags, positional, tail, i = [], [], [], 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if rest_at is not None and len(positional) >= rest_at:
            positional.extend(argv[i - 1:])
            break
        if tok == "--":
            positional.extend(argv[i:])
            break
        if not _is_flag(tok):
            positional.append(tok)
            continue
        if tok in short and short[tok].nargs == argparse.REMAINDER:   # run -m MODULE ARGS...: the rest
            tail = argv[i - 1:]
            break
        if tok[:2] in short and not tok.startswith("--") and tok[1:].partition("=")[0] not in opts:
            action = short[tok[:2]]
            flags.append(tok)
            if action.nargs != 0 and len(tok) == 2 and i < len(argv):
                flags.append(argv[i])
                i += 1
            continue
        i = _long_flag(tok, argv, i, opts, flags)
    if rest_at is None and any(p.startswith("-") for p in positional):
        positional = ["--"] + positional
    return flags + positional + tail


def _long_flag(tok, argv, i, opts, flags):
    """One gflags flag (and its value, from ``argv[i]`` when not attached) into ``flags``;
    returns the index of the next argument."""
    name, eq, value = tok.lstrip("-").partition("=")
    action = opts.get(name)
    if action is None and name.startswith("no") and _is_bool(opts.get(name[2:])) and not eq:
        flags.extend(_bool_tokens(opts[name[2:]], False))
        return i
    if action is None:
        raise FlagError("unknown command line flag '%s'" % name)
    if _is_bool(action):
        flags.extend(_bool_tokens(action, _bool_value(name, value) if eq else True))
    elif action.nargs == 0:          # help and the like
        flags.append(_long(action))
    elif eq:
        flags.append("%s=%s" % (_long(action), value))
    elif action.nargs == "?":
        if i < len(argv) and not _is_flag(argv[i]):
            flags.append("%s=%s" % (_long(action), argv[i]))
            return i + 1
        flags.append("%s=%s" % (_long(action), action.const))
    else:
        if i >= len(argv):
            raise FlagError("flag '%s' is missing its argument" % tok)
        flags.append("%s=%s" % (_long(action), argv[i]))
        return i + 1
    return i


def _bool_tokens(action, value):
    """A store_true action set to ``value``: the option when it flips the default."""
    wanted = isinstance(action, argparse._StoreTrueAction)
    return [_long(action)] if value == wanted else []


def hoist(argv, commands, value_flags):
    """Move flags written before the command to after it (gflags reads them anywhere).

    ``commands``: the command names; ``value_flags``: the names (no dashes) of flags
    that take a value, so that ``-gpu 0 train`` finds ``train``.  Returns argv
    unchanged when no command follows the flags."""
    i = 0
    while i < len(argv) and _is_flag(argv[i]) and argv[i] != "--":
        name, eq, _ = argv[i].lstrip("-").partition("=")
        i += 1
        if not eq and name in value_flags and i < len(argv) and argv[i] not in commands:
            i += 1
    if 0 < i < len(argv) and argv[i] in commands:
        return [argv[i]] + argv[:i] + argv[i + 1:]
    return argv
