//! The command line as a person meets it: bad flags and bad config files fail at start
//! with a message that says what is wrong and how to fix it.

use std::process::Command;

fn granary(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_granary"))
        .args(args)
        .output()
        .expect("run granary");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn config_error(text: &str) -> String {
    let path = std::env::temp_dir().join(format!(
        "granary-cli-{}-{}.toml",
        std::process::id(),
        text.len()
    ));
    std::fs::write(&path, text).unwrap();
    let (ok, stderr) = granary(&["serve", "--no-portmap", "--config", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    assert!(!ok, "bad config accepted:\n{text}");
    stderr
}

#[test]
fn bad_config_names_file_line_and_fix() {
    let e = config_error(
        "listen = \"127.0.0.1:0\"\n[[export]]\npath = \"/\"\nclients = [\"300.1.1.1/8\"]\n",
    );
    assert!(
        e.contains(".toml: line 4: invalid client network \"300.1.1.1/8\""),
        "{e}"
    );
    assert!(e.contains("CIDR notation"), "{e}");
    let e = config_error("[[export]]\npath = \"/\"\nread_only = \"yes\"\n");
    assert!(e.contains("line 3") && e.contains("invalid type"), "{e}");
    let e = config_error("[limits]\nmax_record_bytes = 10\n[[export]]\npath = \"/\"\n");
    assert!(e.contains("line 2") && e.contains("out of range"), "{e}");
}

#[test]
fn missing_config_file_is_reported() {
    let (ok, e) = granary(&["serve", "--config", "/nonexistent/granary.toml"]);
    assert!(!ok);
    assert!(
        e.contains("cannot read config file /nonexistent/granary.toml"),
        "{e}"
    );
}

#[test]
fn bad_flags_are_reported_with_the_fix() {
    let (ok, e) = granary(&["serve", "--listen", "localhost"]);
    assert!(!ok);
    assert!(
        e.contains("--listen: invalid listen address \"localhost\"")
            && e.contains("127.0.0.1:2049"),
        "{e}"
    );
    let (ok, e) = granary(&["serve", "--squash", "some"]);
    assert!(!ok);
    assert!(
        e.contains("--squash") && e.contains("\"none\", \"root\""),
        "{e}"
    );
    let (ok, e) = granary(&["serve", "--workers", "0"]);
    assert!(
        !ok && e.contains("--workers: workers = 0 is out of range"),
        "{e}"
    );
}

#[test]
fn port_in_use_is_reported_with_the_fix() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (ok, e) = granary(&["serve", "--no-portmap", "--listen", &addr]);
    assert!(!ok);
    assert!(
        e.contains(&format!("cannot listen on {addr}")) && e.contains("--listen"),
        "{e}"
    );
}

#[test]
fn help_describes_serve() {
    let out = Command::new(env!("CARGO_BIN_EXE_granary"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--listen",
        "--config",
        "--workers",
        "--read-only",
        "--squash",
        "--max-connections",
        "--max-record-bytes",
        "--max-in-flight",
        "--idle-timeout-secs",
        "--record-timeout-secs",
        "--no-portmap",
        "--index-entries",
        "--index-bytes",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}
