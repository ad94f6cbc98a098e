package agent

import (
	"context"
	"fmt"

	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/protocol"
)

// SteeringMessage is a user message delivered to the running turn, leased
// from the session's message queue.
type SteeringMessage struct {
	LeaseID   string
	MessageID string
	Content   protocol.MessageContent
}

// Steering is the running turn's view of its session's message queue.
// At every step boundary the loop pulls (leases) the queued steering
// messages, records each durably as a steering_message event, acks the
// recorded ones and nacks the rest (they go back to the front of the
// queue), and gives them to the model as user messages.
type Steering interface {
	Pull() []SteeringMessage
	Ack(leaseIDs []string)
	Nack(leaseIDs []string)
}

// SteeringEnvelope introduces a steering message to the model.
const SteeringEnvelope = "The user sent a message while you were working:"

// SteeringText is the text the model reads for a steering message.
func SteeringText(text string) string {
	return SteeringEnvelope + "\n<user_query>\n" + text + "\n</user_query>"
}

// steer delivers the queued steering messages at a step boundary and
// returns the conversation with them appended.
func (r *runner) steer(ctx context.Context, msgs []model.Message) ([]model.Message, error) {
	if r.t.Steering == nil {
		return msgs, nil
	}
	leased := r.t.Steering.Pull()
	for i, m := range leased {
		ev := r.event(SteeringMessageEvent)
		ev.MessageID, ev.Text, ev.Content = m.MessageID, m.Content.Text, &leased[i].Content
		if err := r.emit(ctx, ev); err != nil {
			rest := make([]string, 0, len(leased)-i)
			for _, n := range leased[i:] {
				rest = append(rest, n.LeaseID)
			}
			r.t.Steering.Nack(rest)
			return msgs, fmt.Errorf("steering message %s: %w", m.MessageID, err)
		}
		r.t.Steering.Ack([]string{m.LeaseID})
		msgs = append(msgs, model.Message{Role: model.RoleUser, Text: SteeringText(m.Content.Text)})
	}
	return msgs, nil
}
