package agent

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	agentv1 "github.com/general-agent/general-agent/clients/go/gen/general_agent/v1"
)

// Client is the generated AgentService client (every RPC) plus the helpers of
// this package.
type Client struct {
	agentv1.AgentServiceClient
	conn *grpc.ClientConn // nil when made with New
}

// Dial makes a client for addr ("host:port"). Without options it uses a
// plaintext connection (a server on loopback); pass
// grpc.WithTransportCredentials(credentials.NewTLS(...)) and, for a bearer
// token, grpc.WithPerRPCCredentials for anything else. Like grpc.NewClient it
// does not connect until the first call.
func Dial(addr string, opts ...grpc.DialOption) (*Client, error) {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	return &Client{AgentServiceClient: agentv1.NewAgentServiceClient(conn), conn: conn}, nil
}

// New wraps an existing connection; Close does not close it.
func New(conn grpc.ClientConnInterface) *Client {
	return &Client{AgentServiceClient: agentv1.NewAgentServiceClient(conn)}
}

// Close closes the connection made by Dial.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Text is a text part of a user message.
func Text(text string) *agentv1.ContentPart {
	return &agentv1.ContentPart{Part: &agentv1.ContentPart_Text{Text: &agentv1.TextPart{Text: text}}}
}

// Turn streams one turn (StreamTurn) of the session with the given user
// message. The iterator yields every event of the turn's run up to and
// including its first run_finished (terminal, or SUSPENDED when the run
// waits for hosted calls or approvals), then stops. Once the run has started,
// a dropped stream is followed up with WatchSession after the last sequence
// yielded, so no event is lost or repeated (the run goes on meanwhile only
// with on_disconnect CONTINUE in the turn's options; else the watch shows
// its cancellation). An RPC error is yielded once, with a nil event, as an
// *Error. Breaking out of the loop cancels the call.
func (c *Client) Turn(ctx context.Context, sessionID string, input ...*agentv1.ContentPart) iter.Seq2[*agentv1.SessionEvent, error] {
	return c.TurnRequest(ctx, &agentv1.StreamTurnRequest{SessionId: sessionID, Input: input})
}

// TurnRequest is Turn with a full request (options, request_id).
func (c *Client) TurnRequest(ctx context.Context, req *agentv1.StreamTurnRequest) iter.Seq2[*agentv1.SessionEvent, error] {
	return func(yield func(*agentv1.SessionEvent, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var cursor int64
		runID := ""
		lastContact := time.Now()
		next, err := c.turnEvents(ctx, req)
		for {
			var ev *agentv1.SessionEvent
			if err == nil {
				ev, err = next()
			}
			if err != nil {
				if runID == "" || !transient(err) || time.Since(lastContact) > defaultReconnectTimeout {
					yield(nil, FromError(err))
					return
				}
				next, err = c.watchEvents(ctx, req.GetSessionId(), cursor, defaultReconnectTimeout-time.Since(lastContact))
				continue
			}
			lastContact = time.Now()
			if ev.GetSequence() <= cursor || (runID != "" && ev.GetRunId() != runID) {
				continue // replayed, or another run's (a watch carries the whole session)
			}
			cursor, runID = ev.GetSequence(), ev.GetRunId()
			if !yield(ev, nil) || ev.GetRunFinished() != nil {
				return
			}
		}
	}
}

// turnEvents starts StreamTurn; next gives its events (an early end is UNAVAILABLE).
func (c *Client) turnEvents(ctx context.Context, req *agentv1.StreamTurnRequest) (func() (*agentv1.SessionEvent, error), error) {
	stream, err := c.StreamTurn(ctx, req)
	if err != nil {
		return nil, err
	}
	return func() (*agentv1.SessionEvent, error) { return eventOf(stream.Recv()) }, nil
}

// watchEvents follows the session after cursor (WatchSession), waiting up to
// wait for the connection to come back.
func (c *Client) watchEvents(ctx context.Context, sessionID string, cursor int64, wait time.Duration) (func() (*agentv1.SessionEvent, error), error) {
	ctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(wait, cancel)
	stream, err := c.WatchSession(ctx, &agentv1.WatchSessionRequest{SessionId: sessionID, AfterSequence: &cursor}, grpc.WaitForReady(true))
	if !timer.Stop() || err != nil {
		cancel()
		if err == nil {
			err = status.Error(codes.Unavailable, "the server did not come back in time")
		}
		return nil, err
	}
	return func() (*agentv1.SessionEvent, error) {
		ev, err := eventOf(stream.Recv())
		if err != nil {
			cancel()
		}
		return ev, err
	}, nil
}

// eventOf is a received response's event; an end of stream before the
// run_finished is UNAVAILABLE (a stopping server), so the caller follows up.
func eventOf(resp interface{ GetEvent() *agentv1.SessionEvent }, err error) (*agentv1.SessionEvent, error) {
	if errors.Is(err, io.EOF) {
		return nil, status.Error(codes.Unavailable, "the stream ended before the run finished")
	}
	if err != nil {
		return nil, err
	}
	return resp.GetEvent(), nil
}

// DeltaText is the text of an assistant_delta event ("" for any other event).
func DeltaText(ev *agentv1.SessionEvent) string {
	return ev.GetAssistantDelta().GetText()
}

// IsTerminal reports whether ev is a run_finished that ends its run
// (COMPLETED, STOPPED or FAILED; not SUSPENDED).
func IsTerminal(ev *agentv1.SessionEvent) bool {
	finished := ev.GetRunFinished()
	return finished != nil && finished.GetOutcome() != agentv1.RunOutcome_RUN_OUTCOME_SUSPENDED
}
