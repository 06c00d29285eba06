//! `attach`, `attach-input`, `attach-resize`: a client on a pane's
//! terminal (see `daemon::attach`).

use crate::daemon::event_loop::Daemon;
use crate::protocol::attach as wire;
use crate::protocol::{AttachArgs, AttachInputArgs, AttachResizeArgs};
use crate::protocol::{
    AttachInputReply, AttachReply, AttachResizeReply, CommandError, ErrorCode, Reply,
};

use super::Call;

pub(super) fn attach(d: &mut Daemon, call: &Call, a: AttachArgs) -> Result<Reply, CommandError> {
    let key = d.resolve(&call.scope, &a.agent_id)?;
    if d.attached.pane_of(call.conn).is_some() {
        return Err(CommandError::invalid(
            "this connection is attached already (open another one)",
        ));
    }
    let agent = d
        .panes
        .agent_mut(key)
        .ok_or_else(|| CommandError::not_found(&a.agent_id))?;
    let owns_input = a.input.unwrap_or(true) && agent.attach.owner.is_none();
    agent.attach.clients.push(call.conn);
    if owns_input {
        agent.attach.owner = Some(call.conn);
    }
    let pane = agent.pane_id.clone();
    let recent = agent.attach.recent();
    let line_mode = agent.line_mode();
    d.attached.insert(call.conn, key);
    if let (true, Some(cols), Some(rows)) = (owns_input, a.cols, a.rows) {
        resize(d, key, cols, rows)?;
    }
    let data = wire::encode(&recent);
    Ok(Reply::Attach(AttachReply {
        attached: true,
        pane,
        input: owns_input,
        backlog: recent.len(),
        data,
        line_mode,
    }))
}

pub(super) fn input(
    d: &mut Daemon,
    call: &Call,
    a: AttachInputArgs,
) -> Result<Reply, CommandError> {
    let key = d
        .attached
        .pane_of(call.conn)
        .ok_or_else(|| CommandError::invalid("not attached: send attach first"))?;
    let bytes = wire::decode(&a.data).map_err(CommandError::invalid)?;
    let agent = d
        .panes
        .agent_mut(key)
        .ok_or_else(|| CommandError::not_found("the attached pane"))?;
    match agent.attach.owner {
        Some(owner) if owner != call.conn => {
            return Err(CommandError::new(
                ErrorCode::Forbidden,
                "another attacher owns the input; this one reads only",
            ))
        }
        // The owner left: the next attacher that types takes the input.
        None => agent.attach.owner = Some(call.conn),
        Some(_) => {}
    }
    let pane_id = agent.pane_id.clone();
    let Some(proc_) = agent.proc.as_mut().filter(|p| p.status.is_none()) else {
        return Err(CommandError::not_running(&pane_id));
    };
    proc_.queue_input(&bytes).map_err(|e| e.refusal(&pane_id))?;
    d.write_input(key);
    Ok(Reply::AttachInput(AttachInputReply {
        written: bytes.len(),
    }))
}

pub(super) fn resize_cmd(
    d: &mut Daemon,
    call: &Call,
    a: AttachResizeArgs,
) -> Result<Reply, CommandError> {
    let key = d
        .attached
        .pane_of(call.conn)
        .ok_or_else(|| CommandError::invalid("not attached: send attach first"))?;
    let owner = d.panes.agent(key).and_then(|ag| ag.attach.owner);
    if owner != Some(call.conn) {
        return Err(CommandError::new(
            ErrorCode::Forbidden,
            "only the input owner sets the window size",
        ));
    }
    resize(d, key, a.cols, a.rows)?;
    Ok(Reply::AttachResize(AttachResizeReply {
        cols: a.cols,
        rows: a.rows,
    }))
}

fn resize(
    d: &mut Daemon,
    key: crate::daemon::panes::PaneKey,
    cols: u16,
    rows: u16,
) -> Result<(), CommandError> {
    if cols == 0 || rows == 0 {
        return Err(CommandError::invalid("cols and rows must be at least 1"));
    }
    d.attach_window(key, cols, rows)
        .map_err(|e| CommandError::new(ErrorCode::Os, format!("cannot set the window size: {e}")))
}
