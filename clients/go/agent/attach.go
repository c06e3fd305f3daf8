package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/general-agent/general-agent/clients/go/gen/general_agent/v1"
)

const (
	turnCommandID           = "turn"
	defaultReconnectTimeout = 60 * time.Second
	cancelTimeout           = 5 * time.Second
)

// Answers to a call another stream (or an earlier attach) already gave are
// not errors: the call is resolved either way.
var ignoredAnswerReasons = map[string]bool{"TOOL_CALL_ALREADY_RESOLVED": true, "UNKNOWN_TOOL_CALL": true}

// runner is the state of one Client.Run across its attachments.
type runner struct {
	client      *Client
	sessionID   string
	opts        RunOptions
	turn        *agentv1.RunSessionRequest
	cursor      int64 // the last sequence yielded
	lastContact time.Time
	runID       string          // the turn's run, once its command_result arrived
	confirmed   bool            // the turn's command_result arrived
	finished    bool            // the turn's run reached a terminal run_finished
	terminal    map[string]bool // run ids that reached a terminal run_finished
	started     map[string]bool // calls whose handler (or approval callback) was started
	handlers    sync.WaitGroup

	mu      sync.Mutex                            // guards stream and pending; one Send at a time
	stream  agentv1.AgentService_RunSessionClient // nil between attachments
	pending map[string]*agentv1.RunSessionRequest // command id -> answer not acknowledged yet
}

func newRunner(c *Client, sessionID string, input []*agentv1.ContentPart, opts RunOptions) *runner {
	requestID := opts.RequestID
	if requestID == "" {
		requestID = randomID()
	}
	if opts.OnDisconnect == agentv1.OnDisconnect_ON_DISCONNECT_UNSPECIFIED {
		opts.OnDisconnect = agentv1.OnDisconnect_ON_DISCONNECT_CONTINUE
	}
	turn := &agentv1.RunSessionRequest{Command: &agentv1.RunSessionRequest_Turn{Turn: &agentv1.RunSessionTurn{
		CommandId: turnCommandID, RequestId: requestID, Input: input, Options: opts.Turn,
	}}}
	return &runner{
		client: c, sessionID: sessionID, opts: opts, turn: turn, lastContact: time.Now(),
		terminal: map[string]bool{}, started: map[string]bool{}, pending: map[string]*agentv1.RunSessionRequest{},
	}
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (r *runner) reconnectTimeout() time.Duration {
	if r.opts.ReconnectTimeout > 0 {
		return r.opts.ReconnectTimeout
	}
	return defaultReconnectTimeout
}

// attachment runs one RunSession stream: attach after the cursor, (re)send
// the turn and the unacknowledged answers, follow. stop is true when the
// iterator is over (the run finished, the consumer left, or an error was
// yielded); otherwise err says why the stream ended.
func (r *runner) attachment(ctx context.Context, yield func(*agentv1.SessionEvent, error) bool) (stop bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// WaitForReady lets a reattach wait for the connection to come back,
	// bounded by the reconnect timeout until the first response arrives.
	timer := time.AfterFunc(r.reconnectTimeout()-time.Since(r.lastContact), cancel)
	defer timer.Stop()
	stream, err := r.client.RunSession(ctx, grpc.WaitForReady(true))
	if err != nil {
		return false, FromError(err)
	}
	timer.Stop() // connected: from here the stream lasts as long as the run
	r.open(stream)
	defer r.detach()
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return false, fromStatus(status.New(codes.Unavailable, "RunSession ended before the run finished"))
		}
		if err != nil {
			return false, FromError(err)
		}
		r.lastContact = time.Now()
		if stop := r.onResponse(ctx, resp, yield); stop {
			if r.finished {
				r.closeAndDrain(stream)
			}
			return true, nil
		}
	}
}

// open makes stream the current one and sends what it needs.
func (r *runner) open(stream agentv1.AgentService_RunSessionClient) {
	cursor := r.cursor
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stream = stream
	// A failed Send means the stream is over; Recv reports why.
	_ = stream.Send(&agentv1.RunSessionRequest{Command: &agentv1.RunSessionRequest_Attach{Attach: &agentv1.RunSessionAttach{
		SessionId: r.sessionID, AfterSequence: &cursor, OnDisconnect: r.opts.OnDisconnect,
	}}})
	if !r.confirmed {
		_ = stream.Send(r.turn)
	}
	for _, answer := range r.pending {
		_ = stream.Send(answer)
	}
}

func (r *runner) detach() {
	r.mu.Lock()
	r.stream = nil
	r.mu.Unlock()
}

// deliver keeps an answer until it is acknowledged and sends it on the
// current stream, if any (else the next attachment sends it).
func (r *runner) deliver(commandID string, answer *agentv1.RunSessionRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending[commandID] = answer
	if r.stream != nil {
		_ = r.stream.Send(answer)
	}
}

// onResponse handles one response; true ends the iterator.
func (r *runner) onResponse(ctx context.Context, resp *agentv1.RunSessionResponse, yield func(*agentv1.SessionEvent, error) bool) bool {
	switch body := resp.GetResponse().(type) {
	case *agentv1.RunSessionResponse_CommandResult:
		if err := r.onCommandResult(body.CommandResult); err != nil {
			yield(nil, err)
			return true
		}
		return r.finished
	case *agentv1.RunSessionResponse_Event:
		ev := body.Event
		if ev.GetSequence() <= r.cursor {
			return false // seen before the reattach
		}
		r.cursor = ev.GetSequence()
		r.startHandlers(ctx, ev)
		if !yield(ev, nil) {
			return true
		}
		if IsTerminal(ev) {
			r.terminal[ev.GetRunId()] = true
			r.finished = r.runID != "" && r.terminal[r.runID]
		}
		return r.finished
	default:
		return false // heartbeats and unknown future responses
	}
}

func (r *runner) onCommandResult(result *agentv1.CommandResult) error {
	e := FromStatus(result.GetStatus())
	if result.GetCommandId() == turnCommandID {
		if e != nil {
			return &CommandError{CommandID: result.GetCommandId(), Err: e}
		}
		r.confirmed = true
		r.runID = result.GetRunId()
		r.finished = r.terminal[r.runID]
		return nil
	}
	r.mu.Lock()
	_, known := r.pending[result.GetCommandId()]
	delete(r.pending, result.GetCommandId())
	r.mu.Unlock()
	if known && e != nil && !ignoredAnswerReasons[e.Reason] {
		return &CommandError{CommandID: result.GetCommandId(), Err: e}
	}
	return nil
}

// startHandlers starts the handler of a hosted call or an approval request,
// once per call.
func (r *runner) startHandlers(ctx context.Context, ev *agentv1.SessionEvent) {
	switch body := ev.GetEvent().(type) {
	case *agentv1.SessionEvent_HostedToolCall:
		call := body.HostedToolCall
		r.start("hosted-"+call.GetCallId(), func(id string) *agentv1.RunSessionRequest {
			return hostedResult(ctx, id, call, r.opts.Hosted[call.GetToolName()])
		})
	case *agentv1.SessionEvent_ApprovalRequested:
		asked := body.ApprovalRequested
		r.start("approval-"+asked.GetCallId(), func(id string) *agentv1.RunSessionRequest {
			return approvalAnswer(ctx, id, asked, r.opts.OnApproval)
		})
	}
}

func (r *runner) start(commandID string, answer func(commandID string) *agentv1.RunSessionRequest) {
	if r.started[commandID] {
		return
	}
	r.started[commandID] = true
	r.handlers.Add(1)
	go func() {
		defer r.handlers.Done()
		r.deliver(commandID, answer(commandID))
	}()
}

func approvalAnswer(ctx context.Context, commandID string, asked *agentv1.ApprovalRequestedEvent, onApproval ApprovalFunc) *agentv1.RunSessionRequest {
	decision := Deny("no approval handler in this host")
	if onApproval != nil {
		decision = onApproval(ctx, asked)
	}
	return &agentv1.RunSessionRequest{Command: &agentv1.RunSessionRequest_ResolveApproval{
		ResolveApproval: &agentv1.RunSessionResolveApproval{
			CommandId:       commandID,
			CallId:          asked.GetCallId(),
			Decision:        decision.Decision,
			EditedInputJson: decision.EditedInputJSON,
			Message:         decision.Message,
		},
	}}
}

// closeAndDrain half-closes the stream and reads it to its end, so the server
// finishes the call cleanly (it ends the stream once this stream's runs are over).
func (r *runner) closeAndDrain(stream agentv1.AgentService_RunSessionClient) {
	r.mu.Lock()
	_ = stream.CloseSend()
	r.stream = nil
	r.mu.Unlock()
	for {
		if _, err := stream.Recv(); err != nil {
			return
		}
	}
}

// cancelUnfinished cancels the run when the iterator ends before it did:
// with on_disconnect CONTINUE it would otherwise go on alone.
func (r *runner) cancelUnfinished() {
	if r.finished || r.runID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	_, _ = r.client.CancelRun(ctx, &agentv1.CancelRunRequest{SessionId: r.sessionID, RunId: r.runID})
}
