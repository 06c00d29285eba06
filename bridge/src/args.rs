//! The command line, by hand: three options do not need a parser crate.

use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "usage:
  colibri-bridge init [--nats URL] [--creds FILE] [--tls-ca FILE] [--max-age-days N] [--replicas N]
  colibri-bridge run --host ID [--nats URL] [--creds FILE] [--tls-ca FILE] [--socket PATH]
                     [--heartbeat DURATION]
  colibri-bridge gateway --listen SOCKET [--nats URL] [--creds FILE] [--tls-ca FILE]
                     [--heartbeat DURATION] [--until-stdin-closes]

  --nats       the NATS server(s), comma-separated (default: $COLIBRI_NATS_URL,
               else nats://127.0.0.1:4222)
  --creds      a NATS credentials file (JWT and nkey seed), or a user nkey seed alone
  --tls-ca     the CA that signs the server's certificate
  --host       this host's subject token: [a-z0-9_-]{1,63}
  --socket     colibrid's socket (default: $COLIBRI_SOCKET, else colibri's default)
  --heartbeat  how often colibri_hosts.<host> is rewritten (default 10s); for
               gateway, the heartbeat of a host row that does not say its own
  --listen     the gateway's socket, created mode 0600 (colibri's protocol,
               served from the fleet: docs/FLEET.md)
  --until-stdin-closes  the gateway ends when its standard input closes (a
               parent that dies, even by SIGKILL, leaves no gateway behind)";

#[derive(Debug)]
pub enum Cmd {
    Help,
    Init(InitOpts),
    Run(RunOpts),
    Gateway(GatewayOpts),
}

/// How to reach the NATS server.
#[derive(Clone, Debug, Default)]
pub struct Nats {
    pub url: String,
    pub creds: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
}

#[derive(Debug)]
pub struct InitOpts {
    pub nats: Nats,
    pub max_age: Duration,
    pub replicas: usize,
}

#[derive(Debug)]
pub struct RunOpts {
    pub nats: Nats,
    pub host: String,
    pub socket: PathBuf,
    pub heartbeat: Duration,
}

#[derive(Debug)]
pub struct GatewayOpts {
    pub nats: Nats,
    pub listen: PathBuf,
    pub heartbeat: Duration,
    pub until_stdin_closes: bool,
}

pub fn parse(mut it: impl Iterator<Item = String>) -> Result<Cmd, String> {
    let verb = it.next().ok_or("a command is needed")?;
    let mut url = std::env::var("COLIBRI_NATS_URL")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "nats://127.0.0.1:4222".to_string());
    let mut host = None;
    let mut socket = None;
    let mut listen = None;
    let mut until_stdin_closes = false;
    let mut creds = None;
    let mut tls_ca = None;
    let mut heartbeat = Duration::from_secs(10);
    let mut max_age_days: u64 = 30;
    let mut replicas: usize = 1;
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--nats" => url = value()?,
            "--host" => host = Some(value()?),
            "--socket" => socket = Some(PathBuf::from(value()?)),
            "--listen" => listen = Some(PathBuf::from(value()?)),
            "--until-stdin-closes" => until_stdin_closes = true,
            "--creds" => creds = Some(PathBuf::from(value()?)),
            "--tls-ca" => tls_ca = Some(PathBuf::from(value()?)),
            "--heartbeat" => {
                let v = value()?;
                heartbeat = humantime::parse_duration(&v)
                    .ok()
                    .filter(|d| !d.is_zero())
                    .ok_or(format!("--heartbeat {v:?} is not a duration such as 10s"))?;
            }
            "--max-age-days" => max_age_days = number(&flag, &value()?)?,
            "--replicas" => replicas = number(&flag, &value()?)?,
            "-h" | "--help" => return Ok(Cmd::Help),
            other => return Err(format!("unknown option {other}")),
        }
    }
    let nats = Nats { url, creds, tls_ca };
    match verb.as_str() {
        "init" => Ok(Cmd::Init(InitOpts {
            nats,
            max_age: Duration::from_secs(max_age_days.max(1) * 24 * 3600),
            replicas: replicas.max(1),
        })),
        "run" => {
            let host = host.ok_or("run needs --host")?;
            if !valid_token(&host) {
                return Err(format!(
                    "--host {host:?}: a host id is 1 to 63 of a-z, 0-9, _ and - \
                     (dots would split the NATS subject)"
                ));
            }
            Ok(Cmd::Run(RunOpts {
                nats,
                host,
                socket: colibri::client::resolve_socket(socket.as_deref()),
                heartbeat,
            }))
        }
        "gateway" => Ok(Cmd::Gateway(GatewayOpts {
            nats,
            listen: listen.ok_or("gateway needs --listen SOCKET")?,
            heartbeat,
            until_stdin_closes,
        })),
        "-h" | "--help" | "help" => Ok(Cmd::Help),
        other => Err(format!("unknown command {other}")),
    }
}

fn number<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("{flag} {v:?} is not a whole number"))
}

/// A host id: one NATS subject token, the NATS Agent Protocol's rule
/// (the same check as colibri.toml's `fleet.host_id`).
pub fn valid_token(s: &str) -> bool {
    colibri::config::fleet::valid_host_id(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn argv(s: &str) -> impl Iterator<Item = String> + '_ {
        s.split_whitespace().map(String::from)
    }

    #[test]
    fn a_host_id_is_one_subject_token() {
        assert!(valid_token("db1"));
        assert!(valid_token("web_2-a"));
        for bad in ["", "db1.example", "DB1", "a*", "a>", "a b"] {
            assert!(!valid_token(bad), "{bad:?}");
        }
        assert!(!valid_token(&"a".repeat(64)));
        assert!(parse(argv("run --host db1.example")).is_err());
        assert!(parse(argv("run")).is_err());
        assert!(matches!(parse(argv("run --host db1")), Ok(Cmd::Run(o)) if o.host == "db1"));
        let o = parse(argv(
            "run --host db1 --creds /c --tls-ca /ca --heartbeat 3s --nats tls://hub:4222",
        ));
        assert!(
            matches!(o, Ok(Cmd::Run(o)) if o.nats.creds.as_deref() == Some(Path::new("/c"))
            && o.nats.tls_ca.as_deref() == Some(Path::new("/ca"))
            && o.heartbeat == Duration::from_secs(3)
            && o.nats.url == "tls://hub:4222")
        );
        assert!(parse(argv("run --host db1 --heartbeat 0s")).is_err());
    }
}
