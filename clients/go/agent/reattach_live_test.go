//go:build live

// Tests against a live server (tests/e2e/test_go_client.py runs them with
// GENERAL_AGENT_TEST_ADDRESS set, its fake model scripted as each test says):
// go test -tags live -run Live ./agent/

package agent

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	agentv1 "github.com/general-agent/general-agent/clients/go/gen/general_agent/v1"
)

// proxy is a loopback TCP proxy to the server whose connections the test
// can cut, as a network failure would, while it keeps accepting new ones.
type proxy struct {
	listener net.Listener
	upstream string
	mu       sync.Mutex
	conns    []net.Conn
	accepted int
}

func startProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{listener: listener, upstream: upstream}
	go p.serve()
	t.Cleanup(func() { listener.Close(); p.cut() })
	return p
}

func (p *proxy) serve() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.upstream)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.accepted++
		p.mu.Unlock()
		go func() { _, _ = io.Copy(server, client); server.Close() }()
		go func() { _, _ = io.Copy(client, server); client.Close() }()
	}
}

// cut closes every connection made so far.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

func liveAddress(t *testing.T) string {
	t.Helper()
	address := os.Getenv("GENERAL_AGENT_TEST_ADDRESS")
	if address == "" {
		t.Fatal("GENERAL_AGENT_TEST_ADDRESS is not set: tests/e2e/test_go_client.py runs this test against a live server")
	}
	return address
}

// liveClient is a client of the live server through a new proxy; the
// context bounds the test.
func liveClient(t *testing.T) (context.Context, *proxy, *Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	p := startProxy(t, liveAddress(t))
	client, err := Dial(p.listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return ctx, p, client
}

// checkReattached: the client connected again, and the sequences are every
// event of the session, once, in order.
func checkReattached(t *testing.T, p *proxy, sequences []int64) {
	t.Helper()
	if p.connections() < 2 {
		t.Fatalf("the client never reconnected (%d connection)", p.connections())
	}
	for i, sequence := range sequences {
		if sequence != int64(i+1) {
			t.Fatalf("sequences %v: want 1..%d without gap or repeat", sequences, len(sequences))
		}
	}
}

// The fake model calls the hosted `lookup`, then answers "done". The handler
// cuts the connection before it returns, so its answer goes out on a dead
// stream: Run must reattach after the last sequence it yielded, resend the
// answer, and yield every later event once.
func TestLiveRunReattachesAfterTheConnectionIsCut(t *testing.T) {
	ctx, p, client := liveClient(t)
	created, err := client.CreateSession(ctx, &agentv1.CreateSessionRequest{Session: &agentv1.Session{
		HostedTools: []*agentv1.HostedToolDefinition{{Name: "lookup", InputSchemaJson: `{"type":"object"}`}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	options := RunOptions{Hosted: map[string]HostedFunc{
		"lookup": func(ctx context.Context, call *agentv1.HostedToolCallEvent) (any, error) {
			p.cut()
			return map[string]string{"meaning": "found"}, nil
		},
	}}

	var sequences []int64
	var last *agentv1.SessionEvent
	text := ""
	sessionID := created.GetSession().GetIdentity().GetSessionId()
	for ev, err := range client.Run(ctx, sessionID, []*agentv1.ContentPart{Text("look it up")}, options) {
		if err != nil {
			t.Fatalf("after %v: %v", sequences, err)
		}
		sequences = append(sequences, ev.GetSequence())
		text += DeltaText(ev)
		last = ev
	}

	checkReattached(t, p, sequences)
	if !IsTerminal(last) || last.GetRunFinished().GetOutcome() != agentv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("last event %v, want run_finished COMPLETED", last)
	}
	if text != "done" {
		t.Fatalf("text %q, want the model's reply after the hosted result", text)
	}
	session, err := client.GetSession(ctx, &agentv1.GetSessionRequest{SessionId: sessionID})
	if err != nil {
		t.Fatal(err)
	}
	if got := session.GetSession().GetLastSequence(); got != sequences[len(sequences)-1] {
		t.Fatalf("the session's last sequence is %d, the run yielded up to %d", got, sequences[len(sequences)-1])
	}
}

// The fake model streams its reply slowly (tests/e2e/test_go_client.py
// scripts it); the test cuts the connection at the first delta. Turn must
// follow the run up with WatchSession after the last sequence it yielded.
func TestLiveTurnFollowsUpAfterTheConnectionIsCut(t *testing.T) {
	ctx, p, client := liveClient(t)
	created, err := client.CreateSession(ctx, &agentv1.CreateSessionRequest{Session: &agentv1.Session{}})
	if err != nil {
		t.Fatal(err)
	}
	request := &agentv1.StreamTurnRequest{
		SessionId: created.GetSession().GetIdentity().GetSessionId(),
		Input:     []*agentv1.ContentPart{Text("count")},
		Options:   &agentv1.TurnOptions{OnDisconnect: agentv1.OnDisconnect_ON_DISCONNECT_CONTINUE},
	}

	var sequences []int64
	var last *agentv1.SessionEvent
	text := ""
	for ev, err := range client.TurnRequest(ctx, request) {
		if err != nil {
			t.Fatalf("after %v: %v", sequences, err)
		}
		if text == "" && DeltaText(ev) != "" {
			p.cut()
		}
		sequences = append(sequences, ev.GetSequence())
		text += DeltaText(ev)
		last = ev
	}

	checkReattached(t, p, sequences)
	if !IsTerminal(last) || text != "one two three four five six" {
		t.Fatalf("text %q, last event %v", text, last)
	}
}
