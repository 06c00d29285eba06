//! Every spelling of a destructive command an attacker review ran for real
//! (issue 35, item 3), beside its harmless twin: the guard must flag the
//! first and pass the second. One table so a new spelling is one line.

use super::*;

const CWD: Option<&str> = Some("/home/dev/project");

/// (command, the rule it must match).
const DESTRUCTIVE: &[(&str, &str)] = &[
    // Wrapper options that take a value.
    ("sudo -u root rm -rf /", "rm_outside_cwd"),
    ("sudo -uroot -- rm -rf /", "rm_outside_cwd"),
    ("sudo --user=root rm -rf /", "rm_outside_cwd"),
    ("doas -u root rm -rf /", "rm_outside_cwd"),
    ("nice -n 10 rm -rf /", "rm_outside_cwd"),
    ("timeout -s KILL 60 rm -rf /", "rm_outside_cwd"),
    ("timeout --signal KILL 60 rm -rf /", "rm_outside_cwd"),
    ("env -u HOME rm -rf /", "rm_outside_cwd"),
    ("env -C / rm -rf /home", "rm_outside_cwd"),
    ("nohup rm -rf /home", "rm_outside_cwd"),
    ("ionice -c 3 rm -rf /", "rm_outside_cwd"),
    ("stdbuf -o 0 rm -rf /", "rm_outside_cwd"),
    ("stdbuf -o0 rm -rf /", "rm_outside_cwd"),
    ("chroot /mnt rm -rf /", "rm_outside_cwd"),
    ("command rm -rf /", "rm_outside_cwd"),
    ("exec rm -rf /", "rm_outside_cwd"),
    ("time rm -rf /", "rm_outside_cwd"),
    ("time -p rm -rf /", "rm_outside_cwd"),
    ("echo / | xargs -n 1 rm -rf", "rm_outside_cwd"),
    ("echo / | xargs -I {} rm -rf {}", "rm_outside_cwd"),
    ("busybox rm -rf /home", "rm_outside_cwd"),
    // GNU long options, abbreviated.
    ("rm --recurs --forc /", "rm_outside_cwd"),
    ("rm --rec --fo /home", "rm_outside_cwd"),
    ("rm --recursive /home", "rm_outside_cwd"),
    // Recursive is what deletes; `-f` only silences.
    ("rm -r /home", "rm_outside_cwd"),
    ("rm -R /tmp/dir", "rm_outside_cwd"),
    // Shell keywords in front of the program.
    ("if true; then rm -rf /home; fi", "rm_outside_cwd"),
    ("if rm -rf /home; then :; fi", "rm_outside_cwd"),
    ("for x in a; do rm -rf /home; done", "rm_outside_cwd"),
    ("while true; do rm -rf /home; done", "rm_outside_cwd"),
    ("until false; do rm -rf /home; done", "rm_outside_cwd"),
    ("! rm -rf /home", "rm_outside_cwd"),
    ("{ rm -rf /home; }", "rm_outside_cwd"),
    ("( rm -rf /home )", "rm_outside_cwd"),
    ("case x in x) rm -rf /home;; esac", "rm_outside_cwd"),
    ("true && { false || rm -rf /home; }", "rm_outside_cwd"),
    // Brace expansion and ANSI-C quoting.
    ("{rm,-rf,/home}", "rm_outside_cwd"),
    ("rm -rf /{home,etc}", "rm_outside_cwd"),
    ("$'\\x72m' -rf /home", "rm_outside_cwd"),
    // Targets rm gets elsewhere.
    ("echo /home | xargs rm -rf", "rm_outside_cwd"),
    ("find / -exec rm -rf {} +", "rm_outside_cwd"),
    ("find /home -execdir rm -r {} \\;", "rm_outside_cwd"),
    ("find / -delete", "rm_outside_cwd"),
    ("find /home -name '*.rs' -delete", "rm_outside_cwd"),
    // Nested past the depth limit: fails closed.
    (
        "eval eval eval eval eval eval eval eval rm -rf /",
        "unreadable",
    ),
    // Fed to a shell on its standard input.
    ("echo 'rm -rf /home' | sh", "rm_outside_cwd"),
    ("bash <<'EOF'\nrm -rf /home\nEOF", "rm_outside_cwd"),
    ("sh <<< 'rm -rf /home'", "rm_outside_cwd"),
    // git.
    ("git -c alias.x='push --force' x", "git_force_push"),
    ("git -c alias.x='!rm -rf /home' x", "rm_outside_cwd"),
    ("git push --mirror", "git_force_push"),
    ("git push origin :main", "git_force_push"),
    ("git push --delete origin main", "git_force_push"),
    ("git push -d origin main", "git_force_push"),
    ("git push origin +main", "git_force_push"),
    ("git push --forc origin main", "git_force_push"),
    ("git reset --hard", "git_discard"),
    ("git reset --hard HEAD~3", "git_discard"),
    ("git clean -fdx", "git_discard"),
    ("git clean --force -d", "git_discard"),
    // SQL.
    ("psql -c 'DROP/**/TABLE users'", "sql_drop"),
    ("psql -c 'DROP -- x\nTABLE users'", "sql_drop"),
    ("mysql -e 'DROP # x\nDATABASE prod'", "sql_drop"),
    ("echo 'drop table x' | psql", "sql_drop"),
    ("printf 'DROP TABLE x;' | sqlite3 app.db", "sql_drop"),
    ("psql <<'EOF'\nDROP TABLE x;\nEOF", "sql_drop"),
    ("mysql <<< 'drop database prod'", "sql_drop"),
    ("dropdb prod", "sql_drop"),
    ("dropuser bob", "sql_drop"),
    // Disks.
    ("dd if=/dev/zero of=//dev/sda", "dd_to_device"),
    ("dd if=/dev/zero of=/dev/../dev/sda", "dd_to_device"),
    ("dd if=/dev/zero of=/dev/./sda", "dd_to_device"),
    ("cat disk.img > /dev/da0", "dd_to_device"),
    ("shred /dev/sda", "dd_to_device"),
    ("shred -n 3 -z /dev/ada0", "dd_to_device"),
    ("mke2fs /dev/sda1", "mkfs"),
    ("mkswap /dev/sda2", "mkfs"),
    ("mkfs.ext4 /dev/sda1", "mkfs"),
    ("wipefs -a /dev/sdb", "mkfs"),
    ("newfs -U /dev/ada0p2", "mkfs"),
    ("zfs destroy -r pool/ds", "mkfs"),
    ("zpool destroy pool", "mkfs"),
    ("gpart destroy -F da0", "mkfs"),
    // System configuration.
    ("echo 'sshd_enable=NO' > /etc/rc.conf", "system_config"),
    ("echo x >> //etc/hosts", "system_config"),
    ("echo x | sudo tee /etc/hosts", "system_config"),
    ("echo x | tee -a /usr/local/etc/pkg.conf", "system_config"),
    ("sed -i '' 's/a/b/' /etc/ssh/sshd_config", "system_config"),
    ("sed --in-place 's/a/b/' /etc/fstab", "system_config"),
    // Permissions and owners changed down a tree outside the scope.
    ("chmod -R 777 /", "chmod_outside_scope"),
    ("chmod -Rv 000 /home", "chmod_outside_scope"),
    ("chmod -R -w /srv", "chmod_outside_scope"),
    ("chmod --recurs a+w ../other", "chmod_outside_scope"),
    ("chown -R nobody ~", "chmod_outside_scope"),
    ("chown -hR root:wheel /usr/local", "chmod_outside_scope"),
    ("chown --from=me -R you /var", "chmod_outside_scope"),
    ("chgrp -R wheel /etc", "chmod_outside_scope"),
    ("sudo chmod -R 755 /", "chmod_outside_scope"),
    ("find / -exec chmod -R 777 {} +", "chmod_outside_scope"),
    ("echo /home | xargs chmod -R 700", "chmod_outside_scope"),
];

/// Twins of the above that must pass.
const HARMLESS: &[&str] = &[
    "rm -r ./build",
    "rm -rf target",
    "rm -rf ./a/../b",
    "rm -f /tmp/x.lock",
    "rm --force /tmp/x.lock",
    "echo 'rm -rf /'",
    "grep -r 'drop table' .",
    "git rm -rf --cached src/old",
    "sudo -u root ls",
    "sudo -u rm ls /",
    "doas -u root make install",
    "timeout 60 cargo test",
    "timeout -s KILL 60 cargo test",
    "nice make",
    "nice -n 10 make",
    "env -u HOME cargo build",
    "ionice -c 3 make",
    "stdbuf -o0 make",
    "chroot /mnt ls",
    "time -p cargo build",
    "find . -name '*.o' | xargs -n 1 echo",
    "find . -name '*.o' | xargs rm -f",
    "find . -name x -print",
    "find . -name '*.o' -delete",
    "find target -type d -name incremental -exec rm -rf {} +",
    "busybox ls /",
    "if true; then echo hi; fi",
    "for f in a b; do echo $f; done",
    "while false; do rm -rf ./build; done",
    "{ echo a; echo b; } > ./out",
    "( cd src && ls )",
    "echo {a,b,c}",
    "echo '{rm,-rf,/home}'",
    "sh -c 'sh -c \"sh -c ls\"'",
    "echo 'drop table x' > notes.txt",
    "cat <<'EOF' > notes.md\nrm -rf /\nDROP TABLE x;\nEOF",
    "git commit -m \"$(cat <<'EOF'\nDon't rm -rf / (drop table)\nEOF\n)\"",
    "git push origin main",
    "git push -u origin feature",
    "git push --force-with-lease",
    "git push --force-with-lease origin main",
    "git -c core.editor=vim commit",
    "git -c alias.st=status st",
    "git reset --soft HEAD~1",
    "git reset HEAD src/lib.rs",
    "git clean -n",
    "git clean -ndx",
    "git fetch --force",
    "echo 'select 1' | psql",
    "psql -c 'SELECT * FROM drop_table_log'",
    "createdb test",
    "dd if=/dev/zero of=./file bs=1M count=1",
    "dd if=/dev/sda of=./disk.img",
    "dd if=in of=/dev/null",
    "ls 2>/dev/null",
    "cargo build > /dev/null 2>&1",
    "make &> /dev/null",
    "shred ./secret.txt",
    "zfs list",
    "zfs snapshot pool/ds@now",
    "zpool status",
    "gpart show",
    "echo mkfs is dangerous",
    "cat /etc/rc.conf",
    "grep sshd /etc/rc.conf > ./rc.txt",
    "sed 's/a/b/' /etc/hosts",
    "sed -i 's/a/b/' ./config",
    "tee ./log < /etc/hosts",
    "chmod -R u+w .",
    "chmod -R 755 ./build /home/dev/project/bin",
    "chmod 777 /tmp/x.sock",
    "chown -R me ./data",
    "chgrp -R staff src",
    "chmod -R --reference=./a ./b",
];

fn rule_of(cmd: &str) -> Option<&'static str> {
    let args = serde_json::json!({ "command": cmd }).to_string();
    check("bash", &args, CWD).map(|h| h.rule.as_str())
}

#[test]
fn every_listed_spelling_of_a_destructive_command_is_flagged_and_its_twin_passes() {
    let mut wrong = Vec::new();
    for (cmd, rule) in DESTRUCTIVE {
        let got = rule_of(cmd);
        if got != Some(rule) {
            wrong.push(format!("{cmd:?}: want {rule}, got {got:?}"));
        }
    }
    for cmd in HARMLESS {
        if let Some(got) = rule_of(cmd) {
            wrong.push(format!("{cmd:?}: must pass, got {got}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// `cmd` run through `sh -c` `levels` times, quoted as a shell needs.
fn nest(cmd: &str, levels: usize) -> String {
    (0..levels).fold(cmd.to_string(), |inner, i| {
        let shell = ["sh", "bash", "zsh"][i % 3];
        format!("{shell} -c {}", quote(&inner))
    })
}

#[test]
fn nesting_is_read_to_the_depth_limit_and_flagged_past_it() {
    assert_eq!(rule_of(&nest("rm -rf /home", 5)), Some("rm_outside_cwd"));
    assert_eq!(rule_of(&nest("ls", 5)), None);
    // Past the limit the guard cannot say what runs: it says so.
    assert_eq!(rule_of(&nest("ls", 12)), Some("unreadable"));
    assert_eq!(rule_of(&nest("rm -rf /home", 12)), Some("unreadable"));
    let deep = format!("echo {}x{}", "$(".repeat(30), ")".repeat(30));
    assert_eq!(rule_of(&deep), Some("unreadable"));
    let wrapped = format!("{}rm -rf ./build", "nice ".repeat(40));
    assert_eq!(rule_of(&wrapped), Some("unreadable"));
}

#[test]
fn a_command_longer_than_the_guard_reads_is_flagged() {
    let long = format!("echo {}", "a".repeat(MAX_SCRIPT));
    assert_eq!(rule_of(&long), Some("unreadable"));
}

/// Each shape takes under a second in a debug build; one step quadratic
/// in its size would make it take minutes (the core reads no clock, so
/// this test's time is the check).
#[test]
fn hostile_shapes_are_read_in_linear_time() {
    let n = 100_000;
    let shapes = [
        "sudo ".repeat(n),
        "a | ".repeat(n),
        format!("echo {} | sh | sh | sh | sh", "x ".repeat(n)),
        format!("X=a; X=$X$X; {}echo $X", "X=$X$X; ".repeat(100)),
        format!(
            "find {} -exec sh -c {} +",
            "/r ".repeat(n / 10),
            quote(&"ls; ".repeat(n / 10))
        ),
        "{a,".repeat(n),
        "$(".repeat(n),
        format!("cat <<EOF\n{}", "line\n".repeat(n)),
        "'".repeat(n),
        "\\".repeat(n),
        "x{a,b}".repeat(n / 10),
    ];
    for shape in shapes {
        // Past the read budget a shape is flagged, never passed unread.
        assert!(matches!(rule_of(&shape), None | Some("unreadable")));
    }
}
