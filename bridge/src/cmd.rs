//! `colibri.cmd.<host>`: the subject only the host's live bridge serves.
//! A bridge about to write asks it first (a ping): an answer means
//! another bridge writes for this host, "no responders" that none does.

use std::time::Duration;

use async_nats::{Client, HeaderMap};
use futures_util::StreamExt;
use tokio::task::JoinHandle;

/// The header that makes a request on `colibri.cmd.<host>` a ping: the
/// live bridge answers it with its instance id and nothing else.
pub const PING_HEADER: &str = "Colibri-Ping";
/// A live bridge answers a ping from memory: a slow one is a wedged one.
const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a bridge standing by asks again whether the writer is gone.
const STANDBY_POLL: Duration = Duration::from_secs(1);

pub fn subject(host: &str) -> String {
    format!("colibri.cmd.{host}")
}

/// Who answered a ping, if a bridge did.
async fn ping(client: &Client, host: &str, me: &str) -> Option<String> {
    let mut headers = HeaderMap::new();
    headers.insert(PING_HEADER, me);
    let asked = client.request_with_headers(subject(host), headers, "".into());
    match tokio::time::timeout(PING_TIMEOUT, asked).await {
        // Its own answer, from a subscription this bridge just left.
        Ok(Ok(reply)) => {
            Some(String::from_utf8_lossy(&reply.payload).into_owned()).filter(|who| who != me)
        }
        // No responders: nobody writes. Any other failure (the server
        // away, a wedged peer) is not a live writer either; the sequence
        // chain still refuses a second writer's publish.
        Ok(Err(_)) | Err(_) => None,
    }
}

/// Returns once no other bridge answers for `host`, saying once that it
/// waits.
pub async fn stand_by(client: &Client, host: &str, me: &str) {
    let mut told = false;
    while let Some(other) = ping(client, host, me).await {
        if !told {
            eprintln!(
                "colibri-bridge: another bridge ({other}) writes for host {host}: \
                 standing by until it stops"
            );
            told = true;
        }
        tokio::time::sleep(STANDBY_POLL).await;
    }
    if told {
        eprintln!("colibri-bridge: no other bridge answers for host {host}: taking over");
    }
}

/// The task serving `colibri.cmd.<host>`, stopped (and the subject left)
/// when dropped.
pub struct Server(JoinHandle<()>);

impl Drop for Server {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Subscribes to `colibri.cmd.<host>` and answers there until dropped.
pub async fn serve(client: &Client, host: &str, me: &str) -> Result<Server, String> {
    let mut sub = client
        .subscribe(subject(host))
        .await
        .map_err(|e| format!("subscribe {}: {e}", subject(host)))?;
    // The subscription must be in place before this bridge writes: a
    // second bridge's ping then finds it.
    // Bounded: a flush sent while the connection is down may never end.
    match tokio::time::timeout(PING_TIMEOUT, client.flush()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("subscribe {}: {e}", subject(host))),
        Err(_) => {
            return Err(format!(
                "subscribe {}: the server did not answer",
                subject(host)
            ))
        }
    }
    let client = client.clone();
    let me = me.to_string();
    Ok(Server(tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let Some(reply) = msg.reply else { continue };
            let is_ping = msg
                .headers
                .as_ref()
                .is_some_and(|h| h.get(PING_HEADER).is_some());
            if is_ping {
                let _ = client.publish(reply, me.clone().into()).await;
            }
        }
    })))
}
