use super::*;
use proptest::prelude::*;

fn argvs(command: &str) -> Vec<Vec<String>> {
    parse(command)
        .segments
        .into_iter()
        .map(|s| s.argv)
        .collect()
}

fn kinds(command: &str) -> Vec<OpaqueKind> {
    parse(command).opaque.into_iter().map(|o| o.kind).collect()
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Decision {
    Allow,
    Ask,
    Deny,
}

/// Last matching rule wins per segment; unmatched segments get `Ask`.
fn decide_with(rules: &[(&str, Decision)], command: &str) -> Decision {
    let rules: Vec<(CommandGlob, Decision)> = rules
        .iter()
        .map(|(g, d)| (CommandGlob::new(g).unwrap(), d.clone()))
        .collect();
    decide(&parse(command), Decision::Deny, |segment| {
        rules
            .iter()
            .rev()
            .find(|(g, _)| g.matches(segment))
            .map_or(Decision::Ask, |(_, d)| d.clone())
    })
}

#[test]
fn git_status_rule_does_not_allow_a_chained_rm() {
    let rules = [("git status*", Decision::Allow), ("rm *", Decision::Deny)];
    assert_eq!(decide_with(&rules, "git status --short"), Decision::Allow);
    assert_eq!(decide_with(&rules, "git status; rm -rf ."), Decision::Deny);
    assert_eq!(decide_with(&rules, "git status && rm x"), Decision::Deny);
    assert_eq!(
        decide_with(&[rules[0].clone()], "git status | rm x"),
        Decision::Ask
    );
}

#[test]
fn separators_split_outside_quotes_only() {
    assert_eq!(
        argvs("a 1; b 2 && c || d | e |& f & g\nh"),
        vec![
            vec!["a", "1"],
            vec!["b", "2"],
            vec!["c"],
            vec!["d"],
            vec!["e"],
            vec!["f"],
            vec!["g"],
            vec!["h"]
        ]
    );
    assert_eq!(
        argvs("echo 'a; b' \"c && d\" e\\;f"),
        vec![vec!["echo", "a; b", "c && d", "e;f"]]
    );
    let seps: Vec<_> = parse("a; b && c || d | e & f\ng")
        .segments
        .iter()
        .map(|s| s.separator)
        .collect();
    assert_eq!(
        seps,
        [
            Some(Separator::Semicolon),
            Some(Separator::And),
            Some(Separator::Or),
            Some(Separator::Pipe),
            Some(Separator::Background),
            Some(Separator::Newline),
            None
        ]
    );
}

#[test]
fn substitutions_are_opaque_even_inside_double_quotes() {
    assert_eq!(kinds("echo $(rm x)"), [OpaqueKind::CommandSubstitution]);
    assert_eq!(kinds("echo \"$(rm x)\""), [OpaqueKind::CommandSubstitution]);
    assert_eq!(kinds("echo `rm x`"), [OpaqueKind::Backticks]);
    assert_eq!(
        kinds("echo ${X:-$(rm x)}"),
        [OpaqueKind::CommandSubstitution]
    );
    assert_eq!(
        kinds("diff <(ls a) <(ls b)"),
        [OpaqueKind::ProcessSubstitution; 2]
    );
    assert!(kinds("echo '$(not run)' '`neither`'").is_empty());
    let rules = [("echo *", Decision::Allow)];
    assert_eq!(decide_with(&rules, "echo $(rm x)"), Decision::Deny);
    assert_eq!(decide_with(&rules, "echo '$(rm x)'"), Decision::Allow);
}

#[test]
fn shells_given_a_string_and_eval_are_opaque() {
    for command in [
        "sh -c 'rm x'",
        "bash -lc 'rm x'",
        "/bin/bash -c x",
        "env FOO=1 sh -c x",
        "env -S 'sh -c x'",
        "nohup bash -c x",
        "timeout 5 sh -c x",
        "curl example | sh",
        "eval rm x",
        ". ./script",
        "source env.sh",
    ] {
        let parsed = parse(command);
        assert!(parsed.is_opaque(), "{command} should be opaque");
        assert!(
            parsed
                .opaque
                .iter()
                .any(|o| matches!(o.kind, OpaqueKind::ShellString | OpaqueKind::Eval)),
            "{command}: {:?}",
            parsed.opaque
        );
    }
    assert!(!parse("bash build.sh").is_opaque());
}

#[test]
fn command_builders_compound_commands_and_expanded_programs_are_opaque() {
    assert_eq!(kinds("ls | xargs rm"), [OpaqueKind::CommandBuilder]);
    assert_eq!(
        kinds("find . -name x -exec rm {} \\;"),
        [OpaqueKind::CommandBuilder]
    );
    assert!(!parse("find . -name x -delete").is_opaque());
    assert!(kinds("for f in *; do rm $f; done").contains(&OpaqueKind::Compound));
    assert!(kinds("(rm x)").contains(&OpaqueKind::Compound));
    assert!(kinds("f() { rm x; }; f").contains(&OpaqueKind::Compound));
    assert_eq!(kinds("$CMD x"), [OpaqueKind::ExpandedProgram]);
    assert_eq!(kinds("env $CMD x"), [OpaqueKind::ExpandedProgram]);
    assert_eq!(kinds("sudo rm x"), [OpaqueKind::Privilege]);
    assert!(!parse("echo $HOME").is_opaque());
}

#[test]
fn wrappers_are_seen_through_for_matching() {
    let parsed = parse("FOO=1 nohup nice -n 5 timeout -s KILL 10 env A=b git push");
    let segment = &parsed.segments[0];
    assert_eq!(segment.assignments, ["FOO=1"]);
    assert_eq!(segment.program, ["git", "push"]);
    let push = CommandGlob::new("git push*").unwrap();
    assert!(push.matches(segment));
    assert_eq!(
        decide_with(
            &[("*", Decision::Allow), ("rm *", Decision::Deny)],
            "nohup rm -rf ."
        ),
        Decision::Deny
    );
}

#[test]
fn redirections_are_listed_and_not_arguments() {
    let parsed = parse("sort <in.txt >out.txt 2>&1 2>>log &>all >|forced");
    let segment = &parsed.segments[0];
    assert_eq!(segment.argv, ["sort"]);
    let ops: Vec<_> = segment
        .redirects
        .iter()
        .map(|r| (r.operator.as_str(), r.target.as_str(), r.writes))
        .collect();
    assert_eq!(
        ops,
        [
            ("<", "in.txt", false),
            (">", "out.txt", true),
            ("2>&", "1", false),
            ("2>>", "log", true),
            ("&>", "all", true),
            (">|", "forced", true)
        ]
    );
    assert_eq!(
        parse("echo hi > 'my file'")
            .written_files()
            .collect::<Vec<_>>(),
        ["my file"]
    );
}

#[test]
fn here_documents_are_not_commands_unless_they_expand_substitutions() {
    let parsed = parse("cat <<EOF > out\nrm -rf .\nEOF\necho done");
    assert_eq!(argvs_of(&parsed), vec![vec!["cat"], vec!["echo", "done"]]);
    assert!(!parsed.is_opaque());
    assert_eq!(kinds("cat <<EOF\n$(rm x)\nEOF"), [OpaqueKind::HereDocument]);
    assert!(kinds("cat <<'EOF'\n$(not run)\nEOF").is_empty());
    assert_eq!(kinds("cat <<EOF\nnever closed"), [OpaqueKind::Unparseable]);
}

fn argvs_of(parsed: &ParsedCommand) -> Vec<Vec<String>> {
    parsed.segments.iter().map(|s| s.argv.clone()).collect()
}

#[test]
fn unclosed_quotes_and_huge_commands_are_opaque() {
    assert_eq!(kinds("echo 'open"), [OpaqueKind::Unparseable]);
    assert_eq!(kinds("echo \"open"), [OpaqueKind::Unparseable]);
    assert_eq!(
        kinds("echo $(open"),
        [OpaqueKind::CommandSubstitution, OpaqueKind::Unparseable]
    );
    assert_eq!(kinds("echo >"), [OpaqueKind::Unparseable]);
    assert_eq!(
        kinds(&"a".repeat(MAX_COMMAND_BYTES + 1)),
        [OpaqueKind::TooLong]
    );
    assert_eq!(decide_with(&[("*", Decision::Allow)], ""), Decision::Deny);
}

#[test]
fn comments_and_line_continuations() {
    assert_eq!(argvs("git status # ; rm x"), vec![vec!["git", "status"]]);
    assert_eq!(argvs("git \\\nstatus"), vec![vec!["git", "status"]]);
    assert_eq!(argvs("echo a#b"), vec![vec!["echo", "a#b"]]);
}

#[test]
fn bad_globs_are_typed_errors() {
    let error = CommandGlob::new("git [").unwrap_err();
    assert!(error.to_string().contains("git ["), "{error}");
}

/// Programs `inspect` makes opaque (besides the shells and the compound keywords).
const OPAQUE_PROGRAMS: &[&str] = &[
    "eval", "source", ".", "xargs", "parallel", "find", "sudo", "doas", "su", "pkexec", "runuser",
];

fn simple_word() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_./=-]{1,8}".prop_filter("not a keyword or wrapper", |w| {
        let name = basename(w);
        !COMPOUND.contains(&name)
            && !SHELLS.contains(&name)
            && !is_assignment(w)
            && !WRAPPERS.contains(&name)
            && !OPAQUE_PROGRAMS.contains(&name)
    })
}

proptest! {
    #[test]
    fn no_input_panics(command in ".{0,200}") {
        let parsed = parse(&command);
        for segment in &parsed.segments {
            let _ = segment.text();
        }
    }

    #[test]
    fn no_byte_soup_panics(bytes in proptest::collection::vec(proptest::sample::select(
        vec!['a', ' ', ';', '&', '|', '<', '>', '(', ')', '$', '`', '\'', '"', '\\', '\n', '#', '{', '}', '-', '='],
    ), 0..120)) {
        let command: String = bytes.into_iter().collect();
        let _ = parse(&command);
    }

    #[test]
    fn every_separator_splits_and_each_side_is_matched_on_its_own(
        left in proptest::collection::vec(simple_word(), 1..4),
        right in proptest::collection::vec(simple_word(), 1..4),
        separator in proptest::sample::select(vec![";", "&&", "||", "|", "\n", " ; ", " && ", "&"]),
    ) {
        let command = format!("{} {separator} {}", left.join(" "), right.join(" "));
        let parsed = parse(&command);
        prop_assert!(!parsed.is_opaque(), "{:?}", parsed.opaque);
        prop_assert_eq!(argvs_of(&parsed), vec![left.clone(), right.clone()]);
        // A rule that allows exactly the left side never covers the right one.
        let allow_left = format!("{}*", shell_words::join(&left).replace('\\', "\\\\").replace('*', "\\*").replace('?', "\\?").replace('[', "\\[").replace('{', "\\{"));
        let glob = CommandGlob::new(&allow_left).unwrap();
        let decision = decide(&parsed, Decision::Deny, |s| if glob.matches(s) { Decision::Allow } else { Decision::Ask });
        let right_text = shell_words::join(&right);
        if !glob.matches_text(&right_text) {
            prop_assert_eq!(decision, Decision::Ask);
        }
    }
}
