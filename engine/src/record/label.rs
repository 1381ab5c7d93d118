//! Endpoint labels: `--label REGEX=NAME` rules (docs/trace-format.md, "Endpoint labels"),
//! with the same meaning as `hairline.trace.labels` on the Python side.
//!
//! The text is split at its last `=`: the regex is on the left, in the syntax Rust `regex`
//! and Python `re` read alike (anything else is refused, see [`syntax_problem`]), the
//! label on the right. Each regex is searched for (not anchored unless it says `^`/`$`) in
//! the path without its query; the first rule that matches gives the label, with `$1`,
//! `${1}`, `$name` and `${name}` replaced by capture groups and `$$` by a `$`. A reference
//! to a group the regex does not have, and any other `$`, is refused when the rule is read
//! (so `$1a` must be written `${1}a`). A group that took no part in the match expands to
//! nothing; a label that comes out empty, and a path no rule matches, get the default: the
//! path without its query, or with `--normalize-ids` that path with every id-like segment
//! (all decimal digits, a UUID, or 16 or more hex digits) replaced by `:id`.

use regex::Regex;

/// The regex syntax Python's `re` and Rust's `regex` read alike (docs/trace-format.md): what
/// [`syntax_problem`] lets through either engine compiles to the same matcher, or both
/// refuse. `python/hairline/trace/labels.py` has the same scanner, and
/// tests/data/label_rules.json holds both to it.
const MAX_REPEAT: u64 = 1000;
const MAX_DEPTH: usize = 100;
const ESCAPES: &str = "dDwWsSbBAntrfv";
const FLAGS: &str = "ims";
const SHARED: &str = "is not in the regex syntax Python and Rust share";

/// What is wrong with `\` + `escaped` (`after` is what follows it).
fn escape_problem(escaped: char, after: &[char], in_class: bool) -> Option<String> {
    match escaped {
        '1'..='9' => Some(format!("a back-reference (\\{escaped}) {SHARED}")),
        '0' => Some(format!("an octal escape (\\0) {SHARED}; write \\x00")),
        'Z' | 'z' => Some(format!("\\{escaped} (end of text) {SHARED}; write $")),
        'p' | 'P' => Some(format!("a Unicode class (\\{escaped}) {SHARED}")),
        'u' | 'U' | 'N' => Some(format!("\\{escaped} {SHARED}; write the character itself")),
        'x' => {
            let hex = after.len() >= 2 && after[..2].iter().all(char::is_ascii_hexdigit);
            (!hex).then(|| "\\x takes two hex digits (\\xe9), as both engines read it".into())
        }
        'b' if in_class => {
            Some("\\b inside a class is a backspace to Python and an error to Rust".into())
        }
        '<' | '>' => Some(format!(
            "\\{escaped} is a word boundary to Rust and {escaped} to Python; write {escaped}"
        )),
        c if c.is_ascii_alphanumeric() && !ESCAPES.contains(c) => {
            Some(format!("\\{c} is not an escape both engines read"))
        }
        c if !c.is_ascii() => Some(format!(
            "\\{c} is not an escape both engines read; write {c}"
        )),
        _ => None,
    }
}

/// What a group opening with `(?` at `i` holds.
struct Group {
    problem: Option<String>,
    /// Index just after its opening.
    after: usize,
    /// A global flag group such as `(?i)`.
    global: bool,
}

fn group_problem(p: &[char], i: usize, at_start: bool) -> Group {
    let fail = |problem: String| Group {
        problem: Some(problem),
        after: i,
        global: false,
    };
    let rest = &p[i + 2..];
    let text = |from: usize, to: usize| p[from..to.min(p.len())].iter().collect::<String>();
    match rest {
        ['=' | '!', ..] | ['<', '=' | '!', ..] => {
            return fail(format!("look-around ({}) {SHARED}", text(i, i + 4)))
        }
        ['<', ..] => {
            return fail(format!(
                "a named group written (?<name>...) {SHARED}; write (?P<name>...)"
            ))
        }
        ['P', '=', ..] => return fail(format!("a back-reference ({}) {SHARED}", text(i, i + 4))),
        ['P', '<', name @ ..] => {
            let end = name.iter().position(|&c| c == '>');
            let name_text: String = name[..end.unwrap_or(0)].iter().collect();
            let good = name_text
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name_text
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_');
            return match end {
                Some(end) if good => Group {
                    problem: None,
                    after: i + 4 + end + 1,
                    global: false,
                },
                _ => fail(format!(
                    "the group name {name_text:?} is not letters, digits and _ (not first a digit)"
                )),
            };
        }
        ['(', ..] => return fail(format!("a conditional group (?(...)...) {SHARED}")),
        ['>', ..] => return fail(format!("an atomic group (?>...) {SHARED}")),
        ['#', ..] => return fail(format!("a comment group (?#...) {SHARED}")),
        _ => {}
    }
    let flags: String = rest
        .iter()
        .take_while(|c| c.is_ascii_alphabetic() || **c == '-')
        .collect();
    let closer = rest.get(flags.len()).copied();
    if !matches!(closer, Some(':' | ')')) {
        return fail(format!(
            "(?{flags}{} opens no group both engines read",
            closer.map(String::from).unwrap_or_default()
        ));
    }
    if let Some(flag) = flags.chars().find(|&c| c != '-' && !FLAGS.contains(c)) {
        let why = if flag == 'x' {
            "; verbose mode reads spaces in classes differently"
        } else {
            ""
        };
        return fail(format!("the flag {flag} {SHARED} (use i, m and s){why}"));
    }
    let global = closer == Some(')');
    if global && (flags.contains('-') || !at_start) {
        return fail(format!(
            "flags like (?{flags}) go at the start of the regex, and only to turn flags on; \
             scope them elsewhere: (?{flags}:...)"
        ));
    }
    Group {
        problem: None,
        after: i + 2 + flags.chars().count() + 1,
        global,
    }
}

/// `{n}`, `{n,}`, `{n,m}` or `{,m}` at the start of `p`: the digits before and after the
/// comma (`None` without a comma) and its length; `None` when `p` starts no repetition.
fn repetition(p: &[char]) -> Option<(String, Option<String>, usize)> {
    let close = p.iter().position(|&c| c == '}')?;
    let inside: String = p[1..close].iter().collect();
    let (low, high) = match inside.split_once(',') {
        Some((low, high)) => (low.to_owned(), Some(high.to_owned())),
        None => (inside.clone(), None),
    };
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    (digits(&low) && high.as_deref().is_none_or(digits)).then_some((low, high, close + 1))
}

/// Why `pattern` is outside the syntax both engines read alike (`None` if it is not; the
/// engine may still refuse it, as both would).
fn syntax_problem(pattern: &str) -> Option<String> {
    let p: Vec<char> = pattern.chars().collect();
    let n = p.len();
    let (mut i, mut depth) = (0, 0usize);
    let (mut in_class, mut class_start, mut at_start) = (false, false, true);
    // "repeat", "lazy", "assertion" or "" (anything else) before this character.
    let mut last = "";
    while i < n {
        let c = p[i];
        let next = p.get(i + 1).copied();
        if c == '\\' {
            // A trailing backslash is left to the regex compiler, which refuses it.
            let escaped = next?;
            if let Some(problem) = escape_problem(escaped, &p[i + 2..], in_class) {
                return Some(problem);
            }
            let assertion = !in_class && matches!(escaped, 'b' | 'B' | 'A');
            i += if escaped == 'x' { 4 } else { 2 };
            (at_start, class_start) = (false, false);
            last = if assertion { "assertion" } else { "" };
            continue;
        }
        if in_class {
            if c == '[' {
                if next == Some(':') {
                    return Some(format!(
                        "a POSIX class ([:...:]) {SHARED}; write the characters"
                    ));
                }
                return Some("a [ inside a class nests a class in Rust; write \\[".into());
            }
            if matches!(c, '&' | '-' | '~') && next == Some(c) {
                return Some(format!("a set operation ({c}{c}) inside a class {SHARED}"));
            }
            if c == ']' && !class_start {
                in_class = false;
            }
            class_start = false;
            i += 1;
            continue;
        }
        match c {
            '[' => {
                (in_class, class_start, at_start, last) = (true, true, false, "");
                i += if next == Some('^') { 2 } else { 1 };
            }
            '(' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Some(format!("groups nested deeper than {MAX_DEPTH} {SHARED}"));
                }
                if next == Some('?') {
                    let group = group_problem(&p, i, at_start);
                    if group.problem.is_some() {
                        return group.problem;
                    }
                    if group.global {
                        depth -= 1;
                    } else {
                        at_start = false;
                    }
                    (i, last) = (group.after, "");
                } else {
                    (at_start, last) = (false, "");
                    i += 1;
                }
            }
            '*' | '+' | '?' | '{' => {
                let mut end = i + 1;
                if c == '{' {
                    let Some((low, high, len)) = repetition(&p[i..]) else {
                        return Some(
                            "a { that starts no repetition; write \\{ for the character".into(),
                        );
                    };
                    let written: String = p[i..i + len].iter().collect();
                    if low.is_empty() {
                        return Some(match high {
                            Some(high) => format!("{written} {SHARED}; write {{0,{high}}}"),
                            None => {
                                "a { that starts no repetition; write \\{ for the character".into()
                            }
                        });
                    }
                    let too_big = [Some(low), high]
                        .into_iter()
                        .flatten()
                        .filter(|d| !d.is_empty())
                        .any(|d| d.parse::<u64>().map_or(true, |v| v > MAX_REPEAT));
                    if too_big {
                        return Some(format!("{written}: repetitions are at most {MAX_REPEAT}"));
                    }
                    end = i + len;
                }
                last = match (last, c) {
                    ("repeat", '?') => "lazy",
                    ("repeat", '+') => {
                        return Some(format!(
                            "a possessive repetition (+ after a repetition) {SHARED}"
                        ))
                    }
                    ("", _) => "repeat",
                    ("assertion", _) => {
                        return Some(format!(
                            "a repetition of an assertion (^, $, \\b, \\B, \\A) {SHARED}"
                        ))
                    }
                    _ => {
                        return Some(format!(
                            "a repetition of a repetition {SHARED}; group it: (?:a*)*"
                        ))
                    }
                };
                at_start = false;
                i = end;
            }
            _ => {
                if c == ')' {
                    depth = depth.saturating_sub(1);
                }
                at_start = false;
                last = if matches!(c, '^' | '$') {
                    "assertion"
                } else {
                    ""
                };
                i += 1;
            }
        }
    }
    None
}

/// One `REGEX=NAME` rule.
#[derive(Debug, Clone)]
pub struct LabelRule {
    regex: Regex,
    name: String,
}

/// Parses one `--label` value; the error names the flag and the fix.
pub fn parse_label_rule(text: &str) -> Result<LabelRule, String> {
    let hint = "write REGEX=NAME, e.g. --label '^/users/[0-9]+$=/users/:id' \
                or --label '^/api/(\\w+)=api-$1'";
    let Some((pattern, name)) = text.rsplit_once('=') else {
        return Err(format!("--label {text:?}: no '='; {hint}"));
    };
    if pattern.is_empty() {
        return Err(format!("--label {text:?}: the regex is empty; {hint}"));
    }
    if name.is_empty() {
        return Err(format!(
            "--label {text:?}: the label after the last '=' is empty; {hint}"
        ));
    }
    if let Some(problem) = syntax_problem(pattern) {
        return Err(format!(
            "--label {text:?}: the regex {pattern:?}: {problem}; {hint}"
        ));
    }
    let regex = Regex::new(pattern).map_err(|e| {
        let first = e.to_string();
        let first = first
            .lines()
            .last()
            .unwrap_or("invalid regex")
            .trim()
            .to_owned();
        format!("--label {text:?}: the regex {pattern:?} does not compile ({first}); {hint}")
    })?;
    check_template(name, &regex).map_err(|why| format!("--label {text:?}: {why}; {hint}"))?;
    Ok(LabelRule {
        regex,
        name: name.to_owned(),
    })
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Checks that every `$` in a label template is `$$` or a reference to a group of `regex`.
fn check_template(name: &str, regex: &Regex) -> Result<(), String> {
    let bytes = name.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'$' {
            i += 1;
            continue;
        }
        let (reference, next) = match bytes.get(i + 1) {
            Some(b'$') => {
                i += 2;
                continue;
            }
            Some(b'{') => match name[i + 2..].find('}') {
                Some(len) => (&name[i + 2..i + 2 + len], i + 3 + len),
                None => ("", usize::MAX),
            },
            Some(&b) if is_ident_byte(b) => {
                let len = bytes[i + 1..]
                    .iter()
                    .position(|&b| !is_ident_byte(b))
                    .unwrap_or(bytes.len() - i - 1);
                (&name[i + 1..i + 1 + len], i + 1 + len)
            }
            _ => ("", usize::MAX),
        };
        if next == usize::MAX {
            return Err(format!(
                "the '$' at offset {i} of the label starts no group reference; write $$ for a '$'"
            ));
        }
        if !reference.is_empty() && reference.bytes().all(|b| b.is_ascii_digit()) {
            let groups = regex.captures_len() - 1;
            if reference.parse::<usize>().map_or(true, |n| n > groups) {
                return Err(format!(
                    "${reference} refers to a group the regex does not have (it has {groups}); \
                     for a group followed by digits write ${{N}}"
                ));
            }
        } else if !regex.capture_names().flatten().any(|n| n == reference) {
            return Err(format!(
                "${{{reference}}} names no group of the regex; for a group followed by text \
                 write ${{N}}text"
            ));
        }
        i = next;
    }
    Ok(())
}

/// Replaces id-like path segments with `:id`: `/users/123/posts/9` -> `/users/:id/posts/:id`.
pub fn normalize_ids(path: &str) -> String {
    path.split('/')
        .map(|segment| if is_id(segment) { ":id" } else { segment })
        .collect::<Vec<_>>()
        .join("/")
}

/// All decimal digits, a UUID (8-4-4-4-12 hex digits), or 16 or more hex digits.
fn is_id(segment: &str) -> bool {
    let b = segment.as_bytes();
    let hex = |s: &[u8]| s.iter().all(u8::is_ascii_hexdigit);
    let uuid = b.len() == 36
        && [8, 13, 18, 23].iter().all(|&i| b[i] == b'-')
        && [&b[..8], &b[9..13], &b[14..18], &b[19..23], &b[24..]]
            .iter()
            .all(|part| hex(part));
    (!b.is_empty() && b.iter().all(u8::is_ascii_digit)) || uuid || (b.len() >= 16 && hex(b))
}

/// The rules of one recording, in the order given.
#[derive(Debug, Clone, Default)]
pub struct Labeler {
    rules: Vec<LabelRule>,
    normalize_ids: bool,
}

impl Labeler {
    pub fn new(rules: Vec<LabelRule>, normalize_ids: bool) -> Labeler {
        Labeler {
            rules,
            normalize_ids,
        }
    }

    /// The label of a request path (its query, if any, is ignored).
    pub fn label(&self, path_and_query: &str) -> String {
        let path = path_and_query
            .split_once('?')
            .map_or(path_and_query, |(p, _)| p);
        for rule in &self.rules {
            if let Some(caps) = rule.regex.captures(path) {
                let mut out = String::new();
                caps.expand(&rule.name, &mut out);
                if out.is_empty() {
                    break;
                }
                return out;
            }
        }
        if self.normalize_ids {
            normalize_ids(path)
        } else {
            path.to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed};

    fn labeler(rules: &[&str]) -> Labeler {
        Labeler::new(
            rules.iter().map(|r| parse_label_rule(r).unwrap()).collect(),
            false,
        )
    }

    #[test]
    fn the_first_matching_rule_names_the_path_without_its_query() {
        let l = labeler(&[
            r"^/users/[0-9]+$=/users/:id",
            r"^/api/(\w+)/(?P<v>v[0-9])=api-${v}-$1",
            r"^/files/(.*)=$$files",
            r"/deep=deep",
        ]);
        assert_eq!(l.label("/users/42?x=1"), "/users/:id");
        assert_eq!(l.label("/users/42/posts"), "/users/42/posts");
        assert_eq!(l.label("/api/feed/v2/more"), "api-v2-feed");
        assert_eq!(l.label("/files/a/b"), "$files");
        // Regexes are searched for, not anchored.
        assert_eq!(l.label("/a/deep/b"), "deep");
        assert_eq!(l.label("/other?q=1"), "/other");
    }

    #[test]
    fn an_empty_expansion_falls_back_to_the_path() {
        let l = labeler(&[r"^/x/(a)?=$1", r"^/x=never"]);
        assert_eq!(l.label("/x/a"), "a");
        assert_eq!(l.label("/x/b"), "/x/b");
    }

    #[test]
    fn the_split_is_at_the_last_equals_sign() {
        let l = labeler(&[r"^/q=a=query"]);
        assert_eq!(l.label("/q=a"), "query");
        for bad in ["no-equals", "=name", "^/a=", "(unclosed=x"] {
            let err = parse_label_rule(bad).unwrap_err();
            assert!(err.starts_with("--label"), "{err}");
        }
    }

    #[test]
    fn references_to_missing_groups_and_stray_dollars_are_refused() {
        for good in [r"^/(a)(?P<n>b)=$1-${1}-$n-${n}-$0-$$", r"^/x=a$$b"] {
            assert!(parse_label_rule(good).is_ok(), "{good}");
        }
        for bad in [
            r"^/(a)=$2",
            r"^/(a)=$1a",
            r"^/(a)=${nope}",
            r"^/(a)=cost $",
            r"^/(a)=$-x",
            r"^/(a)=${1",
            r"^/(a)=${}",
        ] {
            let err = parse_label_rule(bad).expect_err(bad);
            assert!(err.starts_with("--label"), "{err}");
        }
        let l = labeler(&[r"^/(a)/(\d+)=${1}x$2"]);
        assert_eq!(l.label("/a/7"), "ax7");
    }

    #[test]
    fn ids_are_normalised_only_when_asked() {
        let uuid = "123e4567-e89b-12d3-a456-426614174000";
        let path = format!("/users/123/files/{uuid}/v/deadbeefdeadbeef0/x1?q=2");
        let plain = Labeler::new(Vec::new(), false);
        let normal = Labeler::new(vec![parse_label_rule("^/never=x").unwrap()], true);
        assert_eq!(plain.label(&path), path.split('?').next().unwrap());
        assert_eq!(normal.label(&path), "/users/:id/files/:id/v/:id/x1");
        assert_eq!(normalize_ids("/deadbeef/"), "/deadbeef/");
    }

    fn config() -> Config {
        Config {
            cases: 256,
            rng_seed: RngSeed::Fixed(0x5eed_1abe),
            failure_persistence: None,
            ..Config::default()
        }
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn label_rules_never_panic_and_labels_are_never_empty(
            rule in "\\PC{0,24}",
            path in "/[a-z0-9/]{0,20}(\\?[a-z=&]{0,10})?",
        ) {
            if let Ok(r) = parse_label_rule(&rule) {
                let label = Labeler::new(vec![r], true).label(&path);
                prop_assert!(!label.is_empty());
            }
        }
    }
}
