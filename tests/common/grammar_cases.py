#!/usr/bin/env python3
"""Writes the expected verdicts of regex_test.cc and json_schema_compiler_test.cc from
independent references: Python's `re` for the regexes and the `jsonschema` package (with its
format checker) for the JSON Schema instances. The outputs, regex_cases.inc and
json_schema_cases.inc, are committed; rerun after editing the cases below:

    python3 tests/common/grammar_cases.py

Regex verdicts: `re.fullmatch` for the plain-regex grammar (CompileRegex). `re` and ECMA-262
agree on every pattern here (ASCII inputs, no `$` before a trailing newline: Python's `$` also
matches there, ECMA's does not, so `$` is written `\\Z` when asking Python).

Schema verdicts: every instance is written as json.dumps writes it by default (`, ` and `: `,
ensure_ascii), compactly, with indent=2 and with ensure_ascii=False; the grammar must accept the
valid ones in every spelling and reject the invalid ones (instances are listed with their keys in
the schema's `properties` order, which the grammar requires).
"""
import json
import random
import re
import sys
from pathlib import Path

import jsonschema

HERE = Path(__file__).resolve().parent

# (pattern, [inputs]) -- verdict: re.fullmatch(pattern with final $ -> \Z, input).
REGEX_CASES = [
    (r"abc", ["abc", "ab", "abcd", ""]),
    (r"^[a-z]{1,8}$", ["a", "abcdefgh", "abcdefghi", "", "aB", "zz"]),
    (r"a|bc|", ["a", "bc", "", "b", "abc"]),
    (r"(ab)*c", ["c", "abc", "ababc", "abac", "ab"]),
    (r"(?:a|b)+?x", ["ax", "abbax", "x", "abx", "aby"]),
    (r"\d{3}-\d{4}", ["555-1234", "55-1234", "5555-123", "abc-defg"]),
    (r"[^0-9]+", ["abc", "a1c", "", "-_"]),
    (r"\w+@\w+\.com", ["me@example.com", "me@example.org", "@example.com", "a_b@c1.com"]),
    (r"\s*x\s*", ["x", "  x\t", "\nx\n", "y"]),
    (r"\S\D\W", ["a-!", "a1!", " a!", "ab "]),
    (r"a.c", ["abc", "a-c", "a\nc", "ac", "a\u00e9c"]),
    (r"[a-c-]", ["a", "-", "d", "c"]),
    (r"[\d\-x]+", ["1-x", "x", "y", "--"]),
    (r"\x41\u0042\t\n", ["AB\t\n", "AB \n"]),
    (r"\.\*\+\?\(\)\[\]\{\}\|\\\/", [".*+?()[]{}|\\/", "a"]),
    (r"a{2}", ["aa", "a", "aaa"]),
    (r"a{2,}", ["a", "aa", "aaaaaaa"]),
    (r"a{2,4}", ["a", "aa", "aaaa", "aaaaa"]),
    (r"a{0,2}b", ["b", "ab", "aab", "aaab"]),
    (r"(a*)*b", ["b", "aab", "aaa"]),
    (r"(a?)+b", ["b", "ab", "aaab"]),
    (r"(a|)*", ["", "aaa", "b"]),
    (r"(?:(?:a|b)c?){2,3}", ["ab", "acbc", "abc", "acbcac", "acbcaca", "a"]),
    (r"x{", ["x{", "x"]),
    (r"a}", ["a}", "a"]),
    (r"[\u00e0-\u00ff]+", ["\u00e0\u00ff", "a", "\u00e9t\u00e9"]),
    (r"\u00e9+", ["\u00e9\u00e9", "e"]),
    (r"(?<year>\d{4})-(?<month>\d{2})", ["2024-01", "24-01"]),
    (r"[\u4e00-\u9fff]{2}", ["\u4e2d\u6587", "\u4e2d", "ab"]),
    (r"^(\+|-)?\d+(\.\d+)?$", ["+1", "-1.5", "1.", ".5", "12"]),
    (r"[A-Z][a-z]*( [A-Z][a-z]*)*", ["John Smith", "john", "John  Smith", "A B C"]),
]

# (schema, [valid instances], [invalid instances]); validity is rechecked with jsonschema below
# and the script stops if a list is wrong, so each list is what jsonschema says.
SCHEMA_CASES = [
    ({"type": "integer"}, [0, -7, 123456789012], ["1", 1.5, None]),
    ({"type": "integer", "minimum": 1, "maximum": 100}, [1, 50, 99, 100], [0, 101, -1, 1000]),
    ({"type": "integer", "exclusiveMinimum": -10, "exclusiveMaximum": 10},
     [-9, 0, 9], [-10, 10, -11, 11]),
    ({"type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807},
     [-9223372036854775808, 9223372036854775807, 0], [9223372036854775808, -9223372036854775809]),
    ({"type": "integer", "minimum": 18446744073709551000},
     [18446744073709551000, 18446744073709551615, 10**25], [18446744073709550999, 5, -1]),
    ({"type": "integer", "minimum": 0.5, "maximum": 10.5}, [1, 10], [0, 11]),
    ({"type": "integer", "maximum": -5}, [-5, -100], [-4, 0, 5]),
    ({"type": "integer", "multipleOf": 7}, [0, 7, -14, 700], [1, -13, 15]),
    ({"type": "number"}, [0, -1.5, 3.25e10, 1e-07, 12], ["x", None]),
    ({"type": "number", "minimum": 0, "maximum": 1}, [0, 0.5, 1, 0.999], [-0.001, 1.0001, 2]),
    ({"type": "number", "exclusiveMinimum": 0.25, "maximum": 3.5},
     [0.26, 0.3, 1, 3.5, 3.49], [0.25, 0.2, 3.51, 4, -1]),
    ({"type": "number", "minimum": -2.75, "exclusiveMaximum": -1.5},
     [-2.75, -2, -1.6, -1.51], [-1.5, -1, -2.76, 0]),
    ({"type": "number", "exclusiveMinimum": 0}, [0.001, 5, 1000.5], [0, -0.5]),
    ({"type": "boolean"}, [True, False], [0, "true"]),
    ({"type": "null"}, [None], [0, False]),
    ({"type": ["string", "null"]}, ["a", None], [1]),
    ({"type": "string"}, ["", "hello", "quote \" and \\ backslash", "tab\tnewline\n", "\u00e9\u4e2d\U0001F600", "ctrl \u0001"], [1, None]),
    ({"type": "string", "minLength": 2, "maxLength": 4}, ["ab", "abcd", "\u00e9\u00e9", "\U0001F600\U0001F600"], ["a", "abcde", ""]),
    ({"type": "string", "pattern": "^[a-z]+$"}, ["abc"], ["", "ABC", "ab1"]),
    ({"type": "string", "pattern": "b+"}, ["b", "abba", "xbx"], ["", "aaa"]),
    ({"type": "string", "pattern": "^a", "maxLength": 3}, ["a", "abc", "a\n"], ["ba", "abcd"]),
    ({"type": "string", "pattern": "\"[0-9]\""}, ["x\"1\"", "\"9\""], ["1", "\"a\""]),
    ({"type": "string", "format": "date"}, ["2024-02-29", "2023-12-31", "0001-01-01"],
     ["2023-02-29", "2024-13-01", "2024-1-01", "0000-01-01", "2024-04-31"]),
    ({"type": "string", "format": "time"}, ["12:34:56Z", "23:59:59.123+05:30", "00:00:00z"],
     ["24:00:00Z", "12:34:56", "12:60:00Z"]),
    ({"type": "string", "format": "date-time"},
     ["2024-01-15T10:30:00Z", "2000-02-29t00:00:00.5-01:00"],
     ["2024-01-15 10:30:00Z", "2024-01-15T10:30:00", "1900-02-29T00:00:00Z"]),
    ({"type": "string", "format": "uuid"}, ["123e4567-e89b-12d3-a456-426614174000", "ABCDEF01-2345-6789-ABCD-EF0123456789"],
     ["123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"]),
    ({"type": "string", "format": "ipv4"}, ["192.168.0.1", "0.0.0.0", "255.255.255.255"],
     ["256.1.1.1", "1.2.3", "01.2.3.4"]),
    ({"type": "string", "format": "email"}, ["a.b+c@example.com", "x@y"], ["no-at-sign"]),
    ({"type": "string", "format": "date", "maxLength": 10}, ["2024-01-01"], ["2024-01-1"]),
    ({"enum": ["red", "green", 3, None, {"a": [1, 2]}, "\u00e9"]},
     ["red", "green", 3, None, {"a": [1, 2]}, "\u00e9"], ["blue", 4, {"a": [2, 1]}, "e"]),
    ({"const": "fixed"}, ["fixed"], ["other"]),
    ({"type": "string", "enum": ["a", "bb", "ccc"], "maxLength": 2}, ["a", "bb"], ["ccc"]),
    ({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
      "required": ["name"]},
     [{"name": "x"}, {"name": "x", "age": 3}, {"name": "x", "age": 3, "extra": [1]}, {"name": "x", "zzz": {}}],
     [{}, {"age": 3}, {"name": 1}, {"name": "x", "age": "3"}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "additionalProperties": False},
     [{}, {"a": 1}, {"b": 2}, {"a": 1, "b": 2}], [{"c": 1}, {"a": 1, "c": 2}, {"a": "x"}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"],
      "additionalProperties": {"type": "string"}},
     [{"a": 1, "b": "x"}, {"a": 1, "b": "x", "c": "y"}], [{"a": 1}, {"a": 1, "b": 2}, {"a": 1, "b": "x", "c": 3}]),
    ({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1, "maxProperties": 2},
     [{"x": 1}, {"x": 1, "y": 2}], [{}, {"x": 1, "y": 2, "z": 3}, {"x": "1"}]),
    ({"type": "object", "properties": {"\u00e9t\u00e9": {"type": "boolean"}, "a/b": {"const": 1}},
      "required": ["\u00e9t\u00e9"], "additionalProperties": False},
     [{"\u00e9t\u00e9": True}, {"\u00e9t\u00e9": False, "a/b": 1}], [{"ete": True}, {"\u00e9t\u00e9": True, "a/b": 2}]),
    ({"type": "object", "patternProperties": {"^x-[a-z]+$": {"type": "integer"}}, "additionalProperties": False},
     [{}, {"x-a": 1}, {"x-ab": 1, "x-b": 2}], [{"x-a": "s"}, {"y": 1}, {"x-A": 1}]),
    ({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"],
      "patternProperties": {"^[0-9]+$": {"type": "boolean"}, "^z": {"type": "boolean"}}},
     [{"id": "a"}, {"id": "a", "12": True, "zz": False}], [{"id": "a", "12": 1}, {"12": True}]),
    ({"type": "object", "properties": {"id": {"type": "integer"}}, "propertyNames": {"maxLength": 3}},
     [{}, {"id": 1}], [{"abcd": 1}, {"id": "x"}]),
    ({"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}, "additionalProperties": {"type": "integer"}},
     [{}, {"ab": 1, "c": 2}], [{"A": 1}, {"a1": 1}, {"ab": "x"}]),
    ({"type": "object", "properties": {"x": {}}, "propertyNames": {"enum": ["x", "y", "z"]}},
     [{"x": 1}, {"x": 1, "y": 2}, {"z": None}], [{"w": 1}]),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
     [[1], [1, 2, 3]], [[], [1, 2, 3, 4], ["a"]]),
    ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
     [[], ["a"], ["a", 1]], [["a", 1, 2], [1], ["a", "b"]]),
    ({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "boolean"}, "minItems": 2},
     [["a", True], ["a", True, False, True]], [["a"], ["a", 1], [True, True]]),
    ({"type": "array", "uniqueItems": False, "items": {"enum": [1, 2]}}, [[1, 1, 2]], [[3]]),
    ({"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True, "minItems": 1},
     [["a"], ["c", "a"], ["a", "b", "c"]], [[], ["a", "a"], ["a", "b", "a"], ["d"]]),
    ({"type": "array", "items": {"type": "boolean"}, "uniqueItems": True, "maxItems": 2},
     [[], [True], [False, True]], [[True, True], [1]]),
    ({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]}, [1, "a"], ["ab", None]),
    ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, [1, "a"], [None, 1.5]),
    ({"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind"]},
                {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind"]}]},
     [{"kind": "a", "x": 1}, {"kind": "b", "y": "s"}], [{"kind": "c"}, {"kind": "a", "x": "s"}, {"x": 1}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
     [{"a": 1}, {"b": None}, {"a": 1, "c": 2}], [{}, {"a": 1, "b": 2}, {"a": "x"}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
     [{"a": 1}, {"b": None}, {"a": 1, "b": 2}], [{}, {"a": "x"}]),
    ({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"a": {"minimum": 5}, "b": {"type": "string"}}}]},
     [{"a": 5}, {"a": 6, "b": "x"}], [{"a": 4}, {"b": "x"}, {"a": 5, "b": 1}]),
    ({"allOf": [{"properties": {"a": {"type": "integer"}}, "additionalProperties": False},
                {"properties": {"b": {"type": "integer"}}}]},
     [{}, {"a": 1}], [{"b": 1}, {"a": 1, "b": 1}]),
    ({"$defs": {"pos": {"type": "integer", "minimum": 1}},
      "type": "object", "properties": {"n": {"$ref": "#/$defs/pos"}, "m": {"$ref": "#/$defs/pos"}}},
     [{"n": 1}, {"n": 2, "m": 3}], [{"n": 0}, {"m": -1}]),
    ({"definitions": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                                "next": {"anyOf": [{"$ref": "#/definitions/node"}, {"type": "null"}]}},
                               "required": ["v", "next"], "additionalProperties": False}},
      "$ref": "#/definitions/node"},
     [{"v": 1, "next": None}, {"v": 1, "next": {"v": 2, "next": {"v": 3, "next": None}}}],
     [{"v": 1}, {"v": 1, "next": {"v": "x", "next": None}}]),
    ({"type": "object", "properties": {"tree": {"$ref": "#"}, "leaf": {"type": "boolean"}}, "additionalProperties": False},
     [{}, {"tree": {"leaf": True}}, {"tree": {"tree": {}}, "leaf": False}], [{"tree": 1}, {"x": 1}]),
    ({"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"type": "string"}}},
     [{"x": "s"}], [{"x": 1}]),
    (True, [1, "x", {"a": [None]}], []),
    ({"type": ["string", "integer"], "not": {"type": "string"}}, [1, -5], ["a"]),
    ({"type": "object", "properties": {"a": {"not": {}}, "b": {"not": {"type": "null"}}}},
     [{}, {"b": 1}], [{"a": 1}, {"b": None}]),
    ({"type": "object", "not": {"required": ["a"]}}, [{}, {"b": 1}], [{"a": 1}]),
    ({"not": {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}}, [{}, {"c": 1}], [{"a": 1}, {"b": 1}, 1]),
    ({"type": "object", "properties": {"a": False, "b": {"type": "integer"}}},
     [{}, {"b": 1}], [{"a": 1}]),
    ({"type": "integer", "minimum": 3, "title": "annotations", "description": "ignored", "default": 5,
      "examples": [4], "$comment": "c", "deprecated": False, "x-vendor": {"anything": 1}},
     [3, 4], [2]),
    ({"type": "object", "properties": {"arr": {"type": "array", "items": {"type": "object",
        "properties": {"k": {"type": "string", "enum": ["u", "v"]}}, "required": ["k"]}}},
      "required": ["arr"]},
     [{"arr": []}, {"arr": [{"k": "u"}, {"k": "v", "z": 1}]}], [{"arr": [{}]}, {"arr": [{"k": "w"}]}]),
]


def random_regex_cases(count=150, texts=12, seed=13):
    """Random patterns over a small alphabet (classes, groups, alternation, every quantifier
    form) with random short texts, so that matches are frequent; `re` is the judge."""
    rng = random.Random(seed)
    alphabet = "ab01-. "

    def atom(depth):
        r = rng.random()
        if depth > 2 or r < 0.45:
            return rng.choice(["a", "b", "0", "1", "\\.", "-", " "])
        if r < 0.6:
            return rng.choice(["[ab]", "[^a]", "[0-9]", "\\d", "\\w", "\\s", "\\D", "[a-b01]", "."])
        return ("(" if r < 0.8 else "(?:") + alternation(depth + 1) + ")"

    def piece(depth):
        a = atom(depth)
        if rng.random() < 0.55:
            return a
        return a + rng.choice(["*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}", "*?", "+?"])

    def alternation(depth):
        return "|".join("".join(piece(depth) for _ in range(rng.randint(0, 3)))
                        for _ in range(rng.choice([1, 1, 1, 2, 3])))

    cases = []
    while len(cases) < count:
        pattern = alternation(0)
        samples = sorted({"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
                          for _ in range(texts)})
        cases.append((pattern, samples))
    return cases


def c_string(s: str) -> str:
    """A C++ string literal of the UTF-8 bytes of `s`, every byte escaped (safe for any text)."""
    return '"' + "".join("\\x%02x" % b for b in s.encode("utf-8")) + '"'


def regex_verdict(pattern: str, text: str) -> bool:
    py = re.sub(r"\$$", r"\\Z", pattern).replace("(?<", "(?P<")
    return re.fullmatch(py, text) is not None


def spellings(instance):
    out = [json.dumps(instance), json.dumps(instance, separators=(",", ":")),
           json.dumps(instance, indent=2), json.dumps(instance, ensure_ascii=False)]
    return list(dict.fromkeys(out))


def main() -> int:
    lines = ["// Generated by grammar_cases.py (verdicts from Python's re.fullmatch); do not edit.\n"]
    for pattern, inputs in REGEX_CASES + random_regex_cases():
        for text in inputs:
            lines.append("{%s, %s, %s},\n" % (c_string(pattern), c_string(text),
                                              "true" if regex_verdict(pattern, text) else "false"))
    (HERE / "regex_cases.inc").write_text("".join(lines))

    lines = ["// Generated by grammar_cases.py (verdicts from Python's jsonschema); do not edit.\n"]
    bad = 0
    for index, (schema, valid, invalid) in enumerate(SCHEMA_CASES):
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        for expected, instances in ((True, valid), (False, invalid)):
            for instance in instances:
                verdict = validator.is_valid(instance)
                if verdict != expected:
                    print(f"case {index}: {instance!r} is {'valid' if verdict else 'invalid'} per "
                          f"jsonschema, listed as the opposite", file=sys.stderr)
                    bad += 1
                texts = spellings(instance) if verdict else [json.dumps(instance)]
                for text in texts:
                    lines.append("{%d, %s, %s, %s},\n" % (
                        index, c_string(json.dumps(schema)), c_string(text),
                        "true" if verdict else "false"))
    (HERE / "json_schema_cases.inc").write_text("".join(lines))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
