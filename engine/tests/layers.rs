//! The engine's modules stay in layers (`docs/architecture.md`, "The engine's modules, in
//! layers"): the policy stages reach nothing above them, and the only import circle is the
//! core's own (`Core` holds the registry, whose callables are handed the core).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every module of `engine/src` and the modules its non-test code names as `crate::NAME`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut texts = BTreeMap::new();
    for entry in std::fs::read_dir(&src).expect("engine/src") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path
                .file_stem()
                .expect("stem")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path).expect("read");
            let code = match text.find("#[cfg(test)]\nmod tests") {
                Some(at) => text[..at].to_owned(),
                None => text,
            };
            texts.insert(name, code);
        }
    }
    texts.remove("lib");
    let modules: BTreeSet<String> = texts.keys().cloned().collect();
    texts
        .iter()
        .map(|(name, code)| {
            let mut named = BTreeSet::new();
            let code: String = code
                .lines()
                .map(|line| line.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            // `crate::a::b` and `use crate::{a, b::c}`.
            for (at, _) in code.match_indices("crate::") {
                let rest = &code[at + "crate::".len()..];
                let words: Vec<&str> = if let Some(list) = rest.strip_prefix('{') {
                    list.split('}').next().unwrap_or("").split(',').collect()
                } else {
                    vec![rest]
                };
                for word in words {
                    let word: String = word
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if modules.contains(&word) && &word != name {
                        named.insert(word);
                    }
                }
            }
            (name.clone(), named)
        })
        .collect()
}

/// Every module `from` reaches through its imports.
fn reach(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut next = vec![from.to_owned()];
    while let Some(module) = next.pop() {
        for named in graph.get(&module).into_iter().flatten() {
            if seen.insert(named.clone()) {
                next.push(named.clone());
            }
        }
    }
    seen
}

#[test]
fn the_policy_stages_import_nothing_above_them() {
    let graph = imports();
    let below: BTreeSet<&str> = [
        "allowlist",
        "governance",
        "approvals",
        "ratelimit",
        "hooks",
        "refusals",
        "auth",
        "cell",
        "clock",
        "error",
        "surface",
        "run_gate",
        // A capability counts its run's posts for their nonces; it imports only `surface`.
        "nonce",
    ]
    .into_iter()
    .collect();
    for stage in [
        "allowlist",
        "governance",
        "approvals",
        "ratelimit",
        "hooks",
        "refusals",
    ] {
        let above: Vec<String> = reach(&graph, stage)
            .into_iter()
            .filter(|m| !below.contains(m.as_str()))
            .collect();
        assert!(above.is_empty(), "{stage} reaches {above:?}");
    }
}

#[test]
fn the_only_import_circle_is_the_cores_own() {
    let graph = imports();
    let circles: BTreeSet<Vec<String>> = graph
        .keys()
        .filter(|m| reach(&graph, m).contains(*m))
        .map(|m| {
            let mut circle: Vec<String> = graph
                .keys()
                .filter(|other| {
                    *other == m
                        || (reach(&graph, m).contains(*other) && reach(&graph, other).contains(m))
                })
                .cloned()
                .collect();
            circle.sort();
            circle
        })
        .collect();
    assert_eq!(
        circles,
        BTreeSet::from([vec![
            "invocation".to_owned(),
            "registry".to_owned(),
            "server".to_owned()
        ]]),
        "the engine's import circles"
    );
}

#[test]
fn nothing_below_the_core_names_it() {
    let graph = imports();
    let core = ["server", "registry", "invocation"];
    let above = ["pipeline", "batch", "scopes", "visibility", "workflow_runs"];
    for (module, named) in &graph {
        if core.contains(&module.as_str()) || above.contains(&module.as_str()) {
            continue;
        }
        for name in core.iter().chain(&above) {
            assert!(!named.contains(*name), "{module} imports {name}");
        }
    }
}
