//! The label rule conformance suite, tests/data/label_rules.json, against the recorder's
//! rules (`hairline_engine::record::parse_label_rule`). The Python importer runs the same
//! file (tests/trace/test_label_conformance.py), so both read every rule alike.

use std::path::PathBuf;

use hairline_engine::record::{parse_label_rule, Labeler};
use serde_json::Value;

fn suite() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/label_rules.json");
    let text = std::fs::read_to_string(&path).expect("the conformance suite is in the repository");
    serde_json::from_str(&text).expect("the conformance suite is JSON")
}

fn text(v: &Value) -> &str {
    v.as_str().expect("a string in the suite")
}

fn pairs(v: &Value) -> Vec<(&str, &str)> {
    v.as_array()
        .map(|items| {
            items
                .iter()
                .map(|pair| (text(&pair[0]), text(&pair[1])))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_rule_is_accepted_or_refused_and_labels_as_the_suite_says() {
    let suite = suite();
    let mut wrong = Vec::new();
    for case in suite["rules"].as_array().expect("rules") {
        let rule = text(&case["rule"]);
        let accept = case["accept"].as_bool().expect("accept");
        match (parse_label_rule(rule), accept) {
            (Ok(parsed), true) => {
                let labeler = Labeler::new(vec![parsed], false);
                for (path, expected) in pairs(&case["labels"]) {
                    let got = labeler.label(path);
                    if got != expected {
                        wrong.push(format!(
                            "{rule:?}: {path:?} labelled {got:?}, not {expected:?}"
                        ));
                    }
                }
            }
            (Ok(_), false) => wrong.push(format!("{rule:?}: accepted, but the suite refuses it")),
            (Err(message), true) => wrong.push(format!(
                "{rule:?}: refused ({message}), but the suite accepts it"
            )),
            (Err(message), false) => {
                let refusal = text(&case["refusal"]);
                if !message.contains(refusal) || !message.starts_with("--label") {
                    wrong.push(format!(
                        "{rule:?}: the refusal does not say {refusal:?}: {message}"
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} differences:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn rules_in_order_and_normalised_ids_label_as_the_suite_says() {
    let suite = suite();
    for case in suite["labelling"].as_array().expect("labelling") {
        let rules = case["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .map(|r| parse_label_rule(text(r)).expect("the suite's rules are good"))
            .collect();
        let labeler = Labeler::new(rules, case["normalize_ids"].as_bool().expect("a flag"));
        for (path, expected) in pairs(&case["labels"]) {
            assert_eq!(labeler.label(path), expected, "{path}");
        }
    }
}
