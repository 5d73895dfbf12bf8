"""Instances for the JSON Schema corpus check: the reference validator (jsonschema with ECMA-262
regexes), the grammar's key order, generation with hypothesis-jsonschema and mutation.

Imported by json_schema_corpus_check.py (the test) and bench/grammar_compare.py; needs
hypothesis==6.108.5, hypothesis-jsonschema==0.23.1 and jsonschema.
"""
import collections
import copy
import decimal
import json
import re
import signal
import sys
import time
import warnings

import jsonschema
import jsonschema.validators
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis_jsonschema import from_schema

# ---------------------------------------------------------------------------------------------
# jsonschema: the reference
# ---------------------------------------------------------------------------------------------

def ecma_regex(pattern):
    """`pattern` for Python's re with ECMA-262's meaning where the two differ in ways the corpus
    meets: `$` is the end of the text only (Python's also matches before a final newline), and
    \\d \\w \\b are ASCII (re.ASCII, passed by the caller)."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "$":
            c = r"\Z"
        out.append(c)
        i += 1
    return "".join(out)


def ecma_search(pattern, text):
    try:
        return re.search(ecma_regex(pattern), text, re.ASCII) is not None
    except re.error:
        return re.search(pattern, text) is not None


# jsonschema's `pattern`, `patternProperties` and `additionalProperties` with ECMA-262 regexes
# (JSON Schema's dialect) instead of Python's, whose \\d also matches other scripts' digits.
def ecma_pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not ecma_search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def ecma_pattern_properties(validator, pattern_properties, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, sub in pattern_properties.items():
        for k, v in instance.items():
            if ecma_search(pattern, k):
                yield from validator.descend(v, sub, path=k, schema_path=pattern)


def ecma_additional_properties(validator, additional, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    props, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = [k for k in instance
              if k not in props and not any(ecma_search(p, k) for p in patterns)]
    if validator.is_type(additional, "object"):
        for k in extras:
            yield from validator.descend(instance[k], additional, path=k)
    elif additional is False and extras:
        yield jsonschema.ValidationError(f"additional properties {extras!r} are not allowed")


def validator_for(schema, formats):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    ecma = jsonschema.validators.extend(cls, {
        "pattern": ecma_pattern, "patternProperties": ecma_pattern_properties,
        "additionalProperties": ecma_additional_properties})
    return ecma(schema, format_checker=cls.FORMAT_CHECKER if formats else None)


def is_valid(validator, instance):
    try:
        return validator.is_valid(instance)
    except Exception:  # noqa: BLE001 - a reference that cannot decide does not count
        return None


# ---------------------------------------------------------------------------------------------
# Key order: the grammar's documented rule
# ---------------------------------------------------------------------------------------------

def resolve(validator, ref):
    try:
        return validator._resolver.lookup(ref).contents  # noqa: SLF001 - jsonschema's resolver
    except Exception:  # noqa: BLE001
        return None


def parts_at(schema, instance, validator, budget=64):
    """The subschemas that apply to `instance` at one place: the schema, its $ref targets, allOf
    members, and the first anyOf/oneOf branch the instance satisfies (the first one otherwise),
    in the order the compiler merges them (the schema's own keywords first)."""
    out, todo, seen = [], [schema], set()
    while todo and len(out) < budget:
        s = todo.pop(0)
        if not isinstance(s, dict) or id(s) in seen:
            continue
        seen.add(id(s))
        out.append(s)
        more = []
        if isinstance(s.get("$ref"), str):
            target = resolve(validator, s["$ref"])
            if target is not None:
                more.append(target)
        if isinstance(s.get("allOf"), list):
            more.extend(s["allOf"])
        for key in ("anyOf", "oneOf"):
            branches = s.get(key)
            if isinstance(branches, list) and branches:
                pick = next((b for b in branches if branch_matches(validator, b, instance)),
                            branches[0])
                more.append(pick)
        todo = more + todo
    return out


def branch_matches(validator, branch, instance):
    try:
        return validator.evolve(schema=branch).is_valid(instance)
    except Exception:  # noqa: BLE001
        return False


def reorder(instance, schema, validator, depth=0):
    """`instance` with every object's keys in the grammar's order (see the module comment)."""
    if depth > 200:
        return instance
    parts = parts_at(schema, instance, validator) if isinstance(schema, dict) else []
    for p in parts:  # a const or enum value is written as the schema writes it
        for value in ([p["const"]] if "const" in p else []) + (
                p["enum"] if isinstance(p.get("enum"), list) else []):
            if isinstance(value, (dict, list)) and same_json(value, instance):
                return order_like(instance, value)
    if isinstance(instance, dict):
        listed, required, subs = [], [], collections.defaultdict(list)
        additional, patterns = [], []
        for p in parts:
            if isinstance(p.get("patternProperties"), dict):
                patterns += list(p["patternProperties"].items())
            props = p.get("properties")
            if isinstance(props, dict):
                for k, v in props.items():
                    if k not in listed:
                        listed.append(k)
                    subs[k].append(v)
            if isinstance(p.get("required"), list):
                required += [k for k in p["required"] if isinstance(k, str) and k not in required]
            if "additionalProperties" in p:
                additional.append(p["additionalProperties"])
        order = [k for k in listed if k in instance]
        order += [k for k in required if k in instance and k not in listed]
        order += [k for k in instance if k not in order]
        out = {}
        for k in order:
            child = subs.get(k, []) + [sub for pat, sub in patterns if ecma_search(pat, k)]
            child = child or additional
            out[k] = reorder(instance[k], {"allOf": child} if child else True, validator,
                             depth + 1)
        return out
    if isinstance(instance, list):
        out = []
        for i, v in enumerate(instance):
            child = []
            for p in parts:
                prefix = p.get("prefixItems")
                items = p.get("items")
                if isinstance(prefix, list) and i < len(prefix):
                    child.append(prefix[i])
                elif isinstance(items, list):
                    if i < len(items):
                        child.append(items[i])
                    elif isinstance(p.get("additionalItems"), dict):
                        child.append(p["additionalItems"])
                elif isinstance(items, dict):
                    child.append(items)
            out.append(reorder(v, {"allOf": child} if child else True, validator, depth + 1))
        return out
    return instance


def same_json(a, b):
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def order_like(instance, template):
    if isinstance(instance, dict) and isinstance(template, dict):
        return {k: order_like(instance[k], template[k]) for k in template if k in instance}
    if isinstance(instance, list) and isinstance(template, list):
        return [order_like(a, b) for a, b in zip(instance, template)]
    return instance


def compact(doc):
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def spaced(doc):
    return json.dumps(doc)


def has_exponent(doc):
    return any(isinstance(v, float) and "e" in repr(v) for _, v in paths(doc))


def plain(doc):
    """Compact JSON with every number written without exponent (1e-05 as 0.00001): how the
    grammar writes numbers that have bounds (docs/structured_outputs.md)."""
    if isinstance(doc, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + plain(v)
                              for k, v in doc.items()) + "}"
    if isinstance(doc, list):
        return "[" + ",".join(plain(v) for v in doc) + "]"
    if isinstance(doc, float) and "e" in repr(doc):
        text = format(decimal.Decimal(repr(doc)), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    return json.dumps(doc, ensure_ascii=False)


# ---------------------------------------------------------------------------------------------
# Instances and mutants
# ---------------------------------------------------------------------------------------------

class GenerationTimeout(BaseException):
    pass


def _quiet_unraisable(hook):
    # The alarm may land in a finalizer or gc callback, where Python prints and drops it; the
    # deadline check in generate() covers that case, so the message is noise.
    def quiet(unraisable):
        if not isinstance(unraisable.exc_value, GenerationTimeout):
            hook(unraisable)
    return quiet


sys.unraisablehook = _quiet_unraisable(sys.unraisablehook)


def generate(schema, count, seconds):
    """Up to `count` distinct instances, or fewer if `seconds` of this process's CPU time pass
    first (CPU, not wall-clock, time: the same instances on a busy machine); (instances, why
    none)."""
    found, keys = [], set()
    deadline = time.process_time() + seconds

    def on_alarm(signum, frame):
        # A backstop for one draw that takes too long; raised inside the generator's own
        # callbacks it may be swallowed, so collect() also checks the deadline.
        raise GenerationTimeout()

    @settings(max_examples=count + 2, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(from_schema(copy.deepcopy(schema)))  # it rewrites the schema it is given
    def collect(value):
        if time.process_time() > deadline:
            raise GenerationTimeout()
        key = json.dumps(value, sort_keys=True)
        if key not in keys and len(found) < count:
            keys.add(key)
            found.append(value)

    old = signal.signal(signal.SIGPROF, on_alarm)
    signal.setitimer(signal.ITIMER_PROF, seconds + 1)
    why = ""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            collect()
    except GenerationTimeout:
        why = "timeout" if not found else ""
    except Exception as e:  # noqa: BLE001 - the generator refusing a schema is not our failure
        why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:160]
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)
    return found, why


def paths(doc, prefix=()):
    yield prefix, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths(v, prefix + (i,))


def replaced(doc, path, fn):
    """A copy of `doc` with the value at `path` replaced by fn(value); fn may return DELETE."""
    if not path:
        return fn(doc)
    doc = json.loads(json.dumps(doc))
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    new = fn(parent[path[-1]])
    if new is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return doc


DELETE = object()


def value_mutations(v):
    """(name, fn) changes of one value: each likely to break some keyword."""
    out = []
    other_type = {bool: 17, int: "17", float: "1.5", str: 17, list: {"k": 1}, dict: [1],
                  type(None): 0}
    out.append(("wrong type", lambda x, t=other_type[type(v)]: t))
    out.append(("null", lambda x: None))
    if isinstance(v, bool):
        out.append(("flipped boolean", lambda x: not x))
    elif isinstance(v, (int, float)):
        out += [("number too large", lambda x: x * 1000 + 10**12),
                ("number too small", lambda x: -abs(x) * 1000 - 10**12),
                ("number plus one", lambda x: x + 1), ("number minus one", lambda x: x - 1),
                ("fraction", lambda x: x + 0.5)]
    elif isinstance(v, str):
        out += [("string too long", lambda x: x + "x" * (len(x) + 300)),
                ("empty string", lambda x: ""),
                ("enum value changed", lambda x: x + "_changed"),
                ("string shortened", lambda x: x[:-1])]
    elif isinstance(v, list):
        out += [("array emptied", lambda x: []),
                ("array grown", lambda x: x + (x[-1:] * 5 if x else [None] * 5)),
                ("array element dropped", lambda x: x[1:])]
    elif isinstance(v, dict):
        out += [("extra key", lambda x: {**x, "zz_extra_key": 1}),
                ("object emptied", lambda x: {})]
        for k in list(v)[:4]:
            out.append(("key dropped", lambda x, k=k: {a: b for a, b in x.items() if a != k}))
    return out


def mutants(instance, rng, limit):
    """Up to `limit` (kind, document) mutants of `instance`, chosen with `rng`."""
    cands = []
    for path, v in paths(instance):
        for name, fn in value_mutations(v):
            cands.append((name, path, fn))
    rng.shuffle(cands)
    out = []
    for name, path, fn in cands[: limit * 3]:
        try:
            out.append((name, replaced(instance, path, fn)))
        except (TypeError, OverflowError, KeyError, IndexError):
            continue
    return out
