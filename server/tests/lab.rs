//! `granary lab`: the list names the seed experiments, and a quick run of each of this
//! suite's experiments prints one JSON object of the documented shape. Timings are not
//! checked: a CI-sized run only shows that every variant ran and reported numbers.

// `granary bench` and `granary lab` are built with the `lab` feature only.
#![cfg(feature = "lab")]

use std::process::Command;

use serde_json::Value;

fn granary(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_granary"))
        .args(args)
        .output()
        .expect("run granary");
    assert!(
        out.status.success(),
        "granary {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

#[test]
fn list_names_the_experiments() {
    let list = granary(&["lab", "list"]);
    for name in ["multigrain", "rangelock"] {
        assert!(list.contains(name), "{name} missing from:\n{list}");
    }
    assert!(list.contains("000_a7f635558418b800.txt"));
    assert!(list.contains("003_aa3bd601831e2c39.txt"));
}

#[test]
fn unknown_experiments_are_refused_with_the_list() {
    let out = Command::new(env!("CARGO_BIN_EXE_granary"))
        .args(["lab", "nosuch"])
        .output()
        .expect("run granary");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("granary lab list"), "{err}");
}

/// Checks the documented shape and returns the variants.
fn check_shape(json: &Value, experiment: &str) -> serde_json::Map<String, Value> {
    assert_eq!(json["experiment"], experiment);
    assert!(json["unit"].as_str().is_some_and(|u| !u.is_empty()));
    assert!(json["higher_is_better"].is_boolean());
    assert!(json["seed_claim"].as_str().is_some_and(|c| !c.is_empty()));
    let variants = json["variants"]
        .as_object()
        .expect("variants object")
        .clone();
    assert!(!variants.is_empty());
    for (name, v) in &variants {
        for key in ["median", "min", "max"] {
            let x = v[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{name}.{key}: {v}"));
            assert!(x.is_finite() && x >= 0.0, "{name}.{key} = {x}");
        }
        let samples = v["samples"].as_array().expect("samples array");
        // fhcache's iozone cells take one pass in each of the two server orders.
        let asked = if name.starts_with("iozone ") { 2 } else { 1 };
        assert_eq!(samples.len(), asked, "{name}: {asked} sample(s) asked for");
        assert!(v["min"].as_f64() <= v["median"].as_f64());
        assert!(v["median"].as_f64() <= v["max"].as_f64());
    }
    // Lab hygiene: the machine and the load before and after, and whether it was busy.
    let m = &json["machine"];
    assert!(
        m["description"]["cores"].as_u64().is_some_and(|c| c >= 1),
        "{m}"
    );
    assert!(m["description"]["cpu"].is_string() && m["description"]["kernel"].is_string());
    for key in ["load_before", "load_after"] {
        assert_eq!(m[key].as_array().map(Vec::len), Some(3), "{key}: {m}");
    }
    let busy = m["busy"].as_bool().expect("busy flag");
    assert_eq!(
        busy,
        m["warning"].is_string(),
        "a busy run carries its warning: {m}"
    );
    assert_eq!(busy, json["context"]["BUSY"].is_string());
    for (name, base) in json["baselines"].as_object().expect("baselines") {
        let base = base.as_str().expect("baseline name");
        assert!(
            variants.contains_key(base),
            "{name}'s baseline {base} is no variant"
        );
    }
    variants
}

#[test]
fn quick_multigrain_json_has_every_design() {
    let out = granary(&["lab", "multigrain", "--quick", "--json", "--samples", "1"]);
    let json: Value = serde_json::from_str(&out).expect("one JSON object");
    let variants = check_shape(&json, "multigrain");
    for name in [
        "stamp T=1 coarse",
        "stamp T=1 separate",
        "stamp T=1 combined",
        "nfs WRITE 4KiB coarse",
        "nfs WRITE 4KiB combined",
    ] {
        assert!(variants.contains_key(name), "{name} missing");
    }
    let res = json["context"]["coarse clock resolution"]
        .as_str()
        .expect("resolution");
    assert!(
        res.ends_with("(clock_getres(CLOCK_REALTIME_COARSE))"),
        "{res}"
    );
    // The server counted its fine-clock reads and floor CASes, divided by the WRITEs sent.
    let notes = json["notes"].as_array().expect("notes");
    let counted = notes.iter().filter_map(Value::as_str).find(|n| {
        n.starts_with("nfs WRITE 4KiB, server in multigrain mode: ") && n.contains("per change")
    });
    assert!(counted.is_some(), "no per-WRITE counts in {notes:?}");
    let stat_notes: Vec<&str> = notes
        .iter()
        .filter_map(Value::as_str)
        .filter(|n| n.starts_with("write+stat"))
        .collect();
    assert_eq!(stat_notes.len(), 2, "{notes:?}");
    for note in stat_notes {
        assert!(
            !note.ends_with("over 0 changes"),
            "changes not counted: {note}"
        );
    }
}

#[test]
fn quick_rangelock_json_has_every_lock_and_thread_count() {
    let out = granary(&["lab", "rangelock", "--quick", "--json", "--samples", "1"]);
    let json: Value = serde_json::from_str(&out).expect("one JSON object");
    let variants = check_shape(&json, "rangelock");
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    for threads in [1, 2, 4, 8] {
        let marked = if threads > cores {
            " oversubscribed"
        } else {
            ""
        };
        for lock in ["none", "mutex", "lockfree", "cheat"] {
            let name = format!("read4k/lock T={threads}{marked} {lock}");
            assert!(variants.contains_key(&name), "{name} missing");
        }
    }
    for op in ["READ", "WRITE"] {
        for lock in ["mutex", "lockfree", "cheat"] {
            let name = format!("nfs {op} 4KiB c{cores} d64 {lock}");
            assert!(variants.contains_key(&name), "{name} missing");
        }
    }
}

#[test]
fn quick_decode_json_has_every_mode_and_statistic() {
    let out = granary(&["lab", "decode", "--quick", "--samples", "1", "--json"]);
    let json: Value = serde_json::from_str(&out).expect("one JSON object");
    let variants = check_shape(&json, "decode");
    for stat in ["avg", "median", "min", "max", "stddev"] {
        for mode in ["pool", "percore", "inline"] {
            let name = format!("eligible→running {stat} µs {mode}");
            assert!(variants.contains_key(&name), "{name} missing");
        }
    }
    for mode in ["pool", "percore", "inline"] {
        let name = format!("1 MiB READ latency avg µs {mode}");
        assert!(
            variants[&name]["median"].as_f64().is_some_and(|x| x > 0.0),
            "{name}"
        );
    }
}

#[test]
fn quick_timers_json_has_every_design_on_at_most_one_worker_per_core() {
    let out = granary(&["lab", "timers", "--quick", "--json", "--samples", "1"]);
    let json: Value = serde_json::from_str(&out).expect("one JSON object");
    let variants = check_shape(&json, "timers");
    let cores = json["machine"]["description"]["cores"]
        .as_u64()
        .expect("cores");
    for design in ["push", "global", "pull", "tokio"] {
        for group in ["insert+cancel", "idle-worker wake-ups"] {
            assert!(
                variants
                    .keys()
                    .any(|n| n.starts_with(group) && n.ends_with(&format!(" {design}"))),
                "{group} {design} missing: {:?}",
                variants.keys()
            );
        }
    }
    // Never more workers than cores unless the group says so.
    for name in variants.keys().filter(|n| n.contains(" workers")) {
        let workers: u64 = name
            .split(" workers")
            .next()
            .and_then(|head| head.rsplit([' ', '(']).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("worker count in {name}"));
        assert!(
            workers <= cores || name.contains("oversubscribed"),
            "{name} on {cores} cores"
        );
    }
}

#[test]
fn quick_fhcache_json_has_off_on_and_stages() {
    let out = granary(&["lab", "fhcache", "--quick", "--json", "--samples", "1"]);
    let json: Value = serde_json::from_str(&out).expect("one JSON object");
    let variants = check_shape(&json, "fhcache");
    let mut names = vec![
        "nfs WRITE 4KiB d64".to_string(),
        "nfs READ 4KiB d64".to_string(),
        "iozone f4m r4k write".to_string(),
        "iozone f4m r1m reread".to_string(),
    ];
    for op in ["WRITE", "READ"] {
        for stage in [
            "decode",
            "handle verify",
            "export",
            "credential",
            "open",
            "close",
            "encode",
            "whole call (dispatcher)",
        ] {
            names.push(format!("stage {op} 4KiB {stage}"));
        }
    }
    for group in names {
        for mode in ["off", "on"] {
            let name = format!("{group} {mode}");
            let median = variants.get(&name).and_then(|v| v["median"].as_f64());
            assert!(median.is_some_and(|m| m > 0.0), "{name}: {median:?}");
        }
    }
}
