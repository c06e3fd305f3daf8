package agent

import (
	"context"
	"errors"
	"io"
	"iter"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

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
// message. The iterator yields every event up to and including the first
// run_finished (terminal, or SUSPENDED when the run waits for hosted calls or
// approvals), then stops. An RPC error is yielded once, with a nil event, as
// an *Error. Breaking out of the loop cancels the call.
func (c *Client) Turn(ctx context.Context, sessionID string, input ...*agentv1.ContentPart) iter.Seq2[*agentv1.SessionEvent, error] {
	return c.TurnRequest(ctx, &agentv1.StreamTurnRequest{SessionId: sessionID, Input: input})
}

// TurnRequest is Turn with a full request (options, request_id).
func (c *Client) TurnRequest(ctx context.Context, req *agentv1.StreamTurnRequest) iter.Seq2[*agentv1.SessionEvent, error] {
	return func(yield func(*agentv1.SessionEvent, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.StreamTurn(ctx, req)
		if err != nil {
			yield(nil, FromError(err))
			return
		}
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(nil, FromError(err))
				return
			}
			ev := resp.GetEvent()
			if !yield(ev, nil) || ev.GetRunFinished() != nil {
				return
			}
		}
	}
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
