package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	// RequestID is the turn's idempotency key (optional).
	RequestID string
	// OnDisconnect is the policy for the run if this stream drops
	// (default CANCEL).
	OnDisconnect agentv1.OnDisconnect
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
// event of the session from the attach on, the last being the run's terminal
// run_finished. A refused command (the turn, or an answer) or a stream error
// is yielded once as an error (*CommandError or *Error) and ends the run's
// stream (the run itself follows OnDisconnect). Breaking out of the loop ends
// the stream the same way.
func (c *Client) Run(ctx context.Context, sessionID string, input []*agentv1.ContentPart, opts RunOptions) iter.Seq2[*agentv1.SessionEvent, error] {
	return func(yield func(*agentv1.SessionEvent, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		var handlers sync.WaitGroup
		defer handlers.Wait() // after cancel: handlers see ctx end
		defer cancel()

		stream, err := c.RunSession(ctx)
		if err != nil {
			yield(nil, FromError(err))
			return
		}
		var sendMu sync.Mutex // one Send at a time (handlers answer from their goroutines)
		send := func(req *agentv1.RunSessionRequest) {
			sendMu.Lock()
			defer sendMu.Unlock()
			// A failed Send means the stream is over; Recv reports why.
			_ = stream.Send(req)
		}
		send(&agentv1.RunSessionRequest{Command: &agentv1.RunSessionRequest_Attach{Attach: &agentv1.RunSessionAttach{
			SessionId: sessionID, OnDisconnect: opts.OnDisconnect,
		}}})
		send(&agentv1.RunSessionRequest{Command: &agentv1.RunSessionRequest_Turn{Turn: &agentv1.RunSessionTurn{
			CommandId: "turn", RequestId: opts.RequestID, Input: input, Options: opts.Turn,
		}}})

		answered := map[string]bool{} // call ids answered (or being answered) by this stream
		finished := map[string]bool{} // run ids that reached a terminal run_finished
		runID := ""                   // the turn's run, once its command_result arrived
		commands := 0
		nextID := func(kind string) string {
			commands++
			return fmt.Sprintf("%s-%d", kind, commands)
		}

		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				yield(nil, fromStatus(status.New(codes.Unknown, "RunSession ended before the run finished")))
				return
			}
			if err != nil {
				yield(nil, FromError(err))
				return
			}
			switch r := resp.GetResponse().(type) {
			case *agentv1.RunSessionResponse_CommandResult:
				result := r.CommandResult
				if e := FromStatus(result.GetStatus()); e != nil {
					yield(nil, &CommandError{CommandID: result.GetCommandId(), Err: e})
					return
				}
				if result.GetCommandId() == "turn" {
					runID = result.GetRunId()
					if finished[runID] {
						closeAndDrain(stream, &sendMu)
						return
					}
				}
			case *agentv1.RunSessionResponse_Event:
				ev := r.Event
				switch body := ev.GetEvent().(type) {
				case *agentv1.SessionEvent_HostedToolCall:
					call := body.HostedToolCall
					if !answered[call.GetCallId()] {
						answered[call.GetCallId()] = true
						id := nextID("hosted")
						handlers.Add(1)
						go func() {
							defer handlers.Done()
							send(hostedResult(ctx, id, call, opts.Hosted[call.GetToolName()]))
						}()
					}
				case *agentv1.SessionEvent_ApprovalRequested:
					asked := body.ApprovalRequested
					if !answered["approval:"+asked.GetCallId()] {
						answered["approval:"+asked.GetCallId()] = true
						id := nextID("approval")
						handlers.Add(1)
						go func() {
							defer handlers.Done()
							decision := Deny("no approval handler in this host")
							if opts.OnApproval != nil {
								decision = opts.OnApproval(ctx, asked)
							}
							send(&agentv1.RunSessionRequest{Command: &agentv1.RunSessionRequest_ResolveApproval{
								ResolveApproval: &agentv1.RunSessionResolveApproval{
									CommandId:       id,
									CallId:          asked.GetCallId(),
									Decision:        decision.Decision,
									EditedInputJson: decision.EditedInputJSON,
									Message:         decision.Message,
								},
							}})
						}()
					}
				}
				if !yield(ev, nil) {
					return
				}
				if IsTerminal(ev) {
					finished[ev.GetRunId()] = true
					if runID != "" && ev.GetRunId() == runID {
						closeAndDrain(stream, &sendMu)
						return
					}
				}
			default:
				// Heartbeats and unknown future responses.
			}
		}
	}
}

// closeAndDrain half-closes the stream and reads it to its end, so the server
// finishes the call cleanly (it ends the stream once this stream's runs are over).
func closeAndDrain(stream interface {
	CloseSend() error
	Recv() (*agentv1.RunSessionResponse, error)
}, sendMu *sync.Mutex) {
	sendMu.Lock()
	_ = stream.CloseSend()
	sendMu.Unlock()
	for {
		if _, err := stream.Recv(); err != nil {
			return
		}
	}
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
