//! The FreeBSD files colibri ships, checked as text against what FreeBSD's
//! own sources say they must contain (nothing here can run on Linux; the
//! smoke script scripts/freebsd-smoke.sh runs them on a 14.x host).

fn read(path: &str) -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/").to_string() + path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `match "key" "value";` statements of the devd(8) block whose first
/// line starts with `header`, comments removed.
fn devd_matches(conf: &str, header: &str) -> Vec<(String, String)> {
    let mut without_comments = String::new();
    let mut rest = conf;
    while let Some(start) = rest.find("/*") {
        without_comments.push_str(&rest[..start]);
        let end = rest[start..].find("*/").expect("unterminated comment");
        rest = &rest[start + end + 2..];
    }
    without_comments.push_str(rest);
    let block_start = without_comments.find(header).expect("the block");
    let block = &without_comments[block_start..];
    let block = &block[..block.find("};").expect("the block's end")];
    block
        .lines()
        .filter_map(|line| line.trim().strip_prefix("match"))
        .map(|m| {
            let quoted: Vec<&str> = m.split('"').collect();
            (quoted[1].to_owned(), quoted[3].to_owned())
        })
        .collect()
}

#[test]
fn devd_resume_rule_matches_the_kernels_power_event() {
    // root_resume() in sys/kern/subr_bus.c: devctl_notify("kern", "power",
    // "resume", NULL); devd.conf(5) lists the same system/subsystem/type.
    let conf = read("dist/devd/colibri.conf");
    let matches = devd_matches(&conf, "notify 100 {");
    let expected = [
        ("system", "kern"),
        ("subsystem", "power"),
        ("type", "resume"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    assert_eq!(matches, expected);
    assert!(conf.contains(r#"action "/usr/local/bin/colibri hint resume";"#));
}

/// The rcorder(8) keywords of an rc script: the first run of consecutive
/// `# KEYWORD:` lines (rcorder stops at the first other line after one).
fn rcorder_header(script: &str) -> Vec<(String, Vec<String>)> {
    let keywords = ["PROVIDE:", "REQUIRE:", "BEFORE:", "KEYWORD:"];
    let parse = |line: &str| {
        let rest = line.strip_prefix("# ")?;
        let key = keywords.iter().find(|k| rest.starts_with(**k))?;
        let words = rest[key.len()..].split_whitespace().map(str::to_owned);
        Some((key.trim_end_matches(':').to_owned(), words.collect()))
    };
    script
        .lines()
        .skip_while(|l| parse(l).is_none())
        .map_while(parse)
        .collect()
}

#[test]
fn rc_script_starts_before_bastille_and_after_syslogd() {
    let script = read("rc.d/colibri");
    let header = rcorder_header(&script);
    let get = |key: &str| {
        header
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no {key} line in the rcorder header: {header:?}"))
    };
    assert_eq!(get("PROVIDE"), ["colibri"]);
    assert!(get("REQUIRE").iter().any(|w| w == "syslogd"));
    assert!(get("REQUIRE").iter().any(|w| w == "LOGIN"));
    // Jails started by Bastille at boot nullfs-mount the socket directories
    // colibri's start creates.
    assert_eq!(get("BEFORE"), ["bastille"]);
    assert_eq!(get("KEYWORD"), ["shutdown"]);
}

#[test]
fn rc_script_does_not_claim_the_tree_kill_needs_root() {
    // procctl(2) PROC_REAP_KILL works for any reaper on its own subtree.
    let script = read("rc.d/colibri");
    let user_doc: String = script
        .lines()
        .skip_while(|l| !l.starts_with("# colibri_user"))
        .take_while(|l| !l.starts_with("# colibri_jails"))
        .collect::<Vec<_>>()
        .join(" ");
    assert!(user_doc.contains("PROC_REAP_KILL"), "{user_doc}");
    assert!(user_doc.contains("does not"), "{user_doc}");
    let packaging = read("docs/PACKAGING.md");
    assert!(
        packaging.contains("Killing an agent's whole\nprocess tree does not need root"),
        "docs/PACKAGING.md must say the tree kill does not need root"
    );
}

#[test]
fn pkg_plist_owns_the_syslog_d_directory() {
    // The ports tree's Templates/BSD.local.dist creates etc/devd and
    // etc/newsyslog.conf.d but not etc/syslog.d, so the package must list it.
    let plist = read("port/sysutils/colibri/pkg-plist");
    assert!(plist.lines().any(|l| l == "etc/syslog.d/colibri.conf"));
    assert!(plist.lines().any(|l| l == "@dir etc/syslog.d"));
}

#[test]
fn jails_md_creates_the_mount_source_before_applying_the_template() {
    // Older Bastille refuses a MOUNT whose host path does not exist, which
    // aborts `bastille template`.
    let doc = read("docs/JAILS.md");
    let position = |needle: &str| {
        doc.find(needle)
            .unwrap_or_else(|| panic!("docs/JAILS.md lacks {needle:?}"))
    };
    let creates =
        position("service colibri restart        # creates /var/run/colibri/jails/agents1");
    let applies = position("bastille template agents1 colibri/colibri-agent");
    assert!(
        creates < applies,
        "the directory is created after the template runs"
    );
    // The code reads the jail's /etc/passwd (platform::lookup_user).
    assert!(!doc.contains("`/etc/master.passwd`, not the host's"));
    assert!(doc.contains("`/etc/passwd` (and its groups in the jail's `/etc/group`)"));
}
