//! Garbage config files: whatever the file holds, validation answers with a report (every
//! problem located inside the file) or a config — never a panic, never a hang.

use proptest::prelude::*;
use switchboard_config::Config;

/// Lines that look like a switchboard config, mixed with noise, so the garbage reaches the
/// semantic checks and not only the TOML parser.
fn config_line() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("allowed_channel_ids"),
        Just("allowed_guild_ids"),
        Just("allowed_category_ids"),
        Just("admins"),
        Just("allow_dms"),
        Just("bind"),
        Just("runner"),
        Just("command"),
        Just("timeout_s"),
        Just("max_parts_per_send"),
        Just("Stanley"),
        Just("everyone"),
        Just("path"),
        Just("default"),
        Just("max_handoff_depth"),
        Just("agent"),
        Just("answer_label"),
        Just("scope"),
    ];
    let value = prop_oneof![
        Just("\"1000000000000000401\"".to_owned()),
        Just("[\"1000000000000000401\", \"x\"]".to_owned()),
        Just("[\"@Stanley\", \"<@&445566778899001122>\"]".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("-1".to_owned()),
        Just("\"127.0.0.1:99999\"".to_owned()),
        Just("{ discord = \"1\", comment = 3 }".to_owned()),
        Just("true".to_owned()),
        Just("\"support\"".to_owned()),
        Just("[\"agent:support\", \"agent:*\", \"agent:sup*\"]".to_owned()),
        "\"[ -~]{0,20}\"",
        "[0-9]{0,25}",
    ];
    prop_oneof![
        prop_oneof![
            Just("[discord]"),
            Just("[entity.users]"),
            Just("[entity.roles]"),
            Just("[entity.sessions]"),
            Just("[toolserver]"),
            Just("[toolserver.rate_limits]"),
            Just("[store]"),
            Just("[agent]"),
            Just("[[agent]]"),
            Just("[agents]"),
            Just("[agents.support]"),
            Just("[agents.default]"),
            Just("[agents.\"two words\"]"),
            Just("[sessions.ops]"),
            Just("[[toolserver.tokens]]"),
        ]
        .prop_map(str::to_owned),
        (key, value).prop_map(|(k, v)| format!("{k} = {v}")),
        "\\PC{0,40}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_text_gets_a_config_or_a_located_report(lines in prop::collection::vec(config_line(), 0..25)) {
        let text = lines.join("\n");
        if let Err(report) = Config::parse(&text, "garbage.toml") {
            prop_assert!(!report.problems.is_empty());
            let line_count = text.lines().count().max(1);
            for problem in &report.problems {
                prop_assert!(problem.line <= line_count + 1, "{problem:?} in\n{text}");
                prop_assert!(!problem.help.is_empty());
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let dir = std::env::temp_dir().join(format!("sb-config-garbage-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("garbage.toml");
        std::fs::write(&path, &bytes).unwrap();
        let _ = Config::load(&path);
    }
}

/// A FIFO (or a directory) at the config path is refused at once: opening it never waits for a
/// writer, and what is checked is the file opened, not the path.
#[cfg(unix)]
#[test]
fn a_fifo_or_a_directory_is_refused_without_blocking() {
    let dir = std::env::temp_dir().join(format!("config-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("switchboard.toml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success());
    let (sender, receiver) = std::sync::mpsc::channel();
    let (path, folder) = (fifo.clone(), dir.clone());
    std::thread::spawn(move || {
        let _ = sender.send((
            switchboard_config::read_config_file(&path),
            switchboard_config::read_config_file(&folder),
        ));
    });
    let (from_fifo, from_dir) = receiver
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("reading a FIFO blocked");
    for answer in [from_fifo, from_dir] {
        match answer {
            Err(switchboard_config::ConfigError::Unusable { why, .. }) => {
                assert!(why.contains("not a regular file"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
