package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"time"

	"google.golang.org/grpc/codes"

	agentv1 "github.com/general-agent/general-agent/clients/go/gen/general_agent/v1"
)

// HostedFunc executes one hosted tool call. Its output becomes the tool
// result: a string is the tool text, anything else is marshalled to JSON
// (a json.RawMessage is sent as is). An error becomes an error result (the
// model sees is_error with the error's text). ctx ends when the run does.
type HostedFunc func(ctx context.Context, call *agentv1.HostedToolCallEvent) (any, error)

// ApprovalFunc answers one approval request (see Approve, ApproveAlways and
// Deny). It may block (for a person to answer); ctx ends when the run does.
type ApprovalFunc func(ctx context.Context, request *agentv1.ApprovalRequestedEvent) Decision

// Decision is an answer to an approval request.
type Decision struct {
	Decision agentv1.ApprovalDecision
	// EditedInputJSON replaces the shown input (APPROVE, APPROVE_ALWAYS); the
	// server validates it against the tool's schema.
	EditedInputJSON string
	// Message is what the model gets with DENY.
	Message string
}

// Approve runs the call as shown.
func Approve() Decision {
	return Decision{Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_APPROVE}
}

// ApproveAlways runs the call and approves its tool for the rest of the session.
func ApproveAlways() Decision {
	return Decision{Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_APPROVE_ALWAYS}
}

// Deny refuses the call; the model sees message as the tool's error ("" =
// the server's default text).
func Deny(message string) Decision {
	return Decision{Decision: agentv1.ApprovalDecision_APPROVAL_DECISION_DENY, Message: message}
}

// RunOptions configures Client.Run.
type RunOptions struct {
	// Hosted maps hosted tool names to their handlers. A hosted call of a
	// tool with no handler is answered with an error result.
	Hosted map[string]HostedFunc
	// OnApproval answers approval requests. Nil denies every request
	// (fail-closed).
	OnApproval ApprovalFunc
	// Turn carries the turn's busy policy; its on_disconnect is ignored
	// (OnDisconnect is the stream's).
	Turn *agentv1.TurnOptions
	// RequestID is the turn's idempotency key (default: a random one). It
	// stays the same across reattaches, so a resent turn is the same turn.
	RequestID string
	// OnDisconnect is the policy for the run while no stream is attached
	// (default CONTINUE, so a dropped stream can reattach to the run).
	OnDisconnect agentv1.OnDisconnect
	// ReconnectTimeout bounds how long Run keeps reattaching without any
	// contact with the server (default 60s).
	ReconnectTimeout time.Duration
}

// CommandError is a RunSession command the server refused (its
// command_result carried an error status).
// FromError, Reason and HasReason see through it to the decoded status.
type CommandError struct {
	CommandID string
	Err       *Error
}

func (e *CommandError) Error() string { return fmt.Sprintf("command %s: %v", e.CommandID, e.Err) }

// Unwrap gives the decoded status.
func (e *CommandError) Unwrap() error { return e.Err }

// Run drives one turn over RunSession: it attaches to the session, starts
// the turn, and answers every hosted_tool_call (with opts.Hosted) and every
// approval_requested (with opts.OnApproval) as it arrives, each handler in
// its own goroutine, until the turn's run ends. The iterator yields every
// event of the session from the attach on, each once and in sequence order,
// the last being the run's terminal run_finished.
//
// A dropped stream (UNAVAILABLE, or a stream that ends early) is attached
// again with after_sequence = the last sequence yielded: the server replays
// what was missed, and the turn and any answer not yet acknowledged are sent
// again (the turn keeps its request_id; an identical answer is not an
// error). A refused command (the turn, or an answer) or any other error is
// yielded once as an error (*CommandError or *Error) and ends the iterator.
// Leaving early (breaking out of the loop, or an error) cancels the run.
func (c *Client) Run(ctx context.Context, sessionID string, input []*agentv1.ContentPart, opts RunOptions) iter.Seq2[*agentv1.SessionEvent, error] {
	return func(yield func(*agentv1.SessionEvent, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		r := newRunner(c, sessionID, input, opts)
		defer r.handlers.Wait() // after cancel: handlers see ctx end
		defer cancel()
		defer r.cancelUnfinished()

		session, err := c.GetSession(ctx, &agentv1.GetSessionRequest{SessionId: sessionID})
		if err != nil {
			yield(nil, FromError(err))
			return
		}
		r.cursor = session.GetSession().GetLastSequence()
		for {
			stop, err := r.attachment(ctx, yield)
			if stop {
				return
			}
			if !transient(err) || time.Since(r.lastContact) > r.reconnectTimeout() {
				yield(nil, err)
				return
			}
		}
	}
}

// transient is a dropped connection or a stopping server (reattach), not an
// answer of the service.
func transient(err error) bool {
	e := FromError(err)
	if e == nil {
		return false
	}
	return e.Code == codes.Unavailable || ((e.Code == codes.Internal || e.Code == codes.Unknown) && e.Reason == "")
}

// hostedResult runs the handler (nil: no handler) and makes the hosted_result command.
func hostedResult(ctx context.Context, commandID string, call *agentv1.HostedToolCallEvent, handler HostedFunc) *agentv1.RunSessionRequest {
	result := &agentv1.RunSessionHostedResult{CommandId: commandID, CallId: call.GetCallId()}
	if handler == nil {
		result.Result = &agentv1.RunSessionHostedResult_Error{
			Error: fmt.Sprintf("no handler for hosted tool %q in this host", call.GetToolName()),
		}
	} else if output, err := safeCall(ctx, handler, call); err != nil {
		result.Result = &agentv1.RunSessionHostedResult_Error{Error: err.Error()}
	} else if encoded, err := json.Marshal(output); err != nil {
		result.Result = &agentv1.RunSessionHostedResult_Error{Error: fmt.Sprintf("the host could not encode the output: %v", err)}
	} else {
		result.Result = &agentv1.RunSessionHostedResult_OutputJson{OutputJson: string(encoded)}
	}
	return &agentv1.RunSessionRequest{Command: &agentv1.RunSessionRequest_HostedResult{HostedResult: result}}
}

// safeCall runs a handler, turning a panic into an error result.
func safeCall(ctx context.Context, handler HostedFunc, call *agentv1.HostedToolCallEvent) (output any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("hosted tool %q panicked: %v", call.GetToolName(), p)
		}
	}()
	return handler(ctx, call)
}
