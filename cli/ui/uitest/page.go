package uitest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Page is one tab, attached in flat mode.
type Page struct {
	b       *Browser
	session string
}

// Open makes a tab of width × height CSS pixels, navigates it to url and waits for the
// document to finish loading.
func (b *Browser) Open(ctx context.Context, url string, width, height int) (*Page, error) {
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		return nil, err
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached); err != nil {
		return nil, err
	}
	p := &Page{b: b, session: attached.SessionID}
	for _, domain := range []string{"Page.enable", "Runtime.enable", "Log.enable"} {
		if err := b.call(ctx, p.session, domain, nil, nil); err != nil {
			return nil, err
		}
	}
	if err := b.call(ctx, p.session, "Emulation.setDeviceMetricsOverride", map[string]any{
		"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil); err != nil {
		return nil, err
	}
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	if err := b.call(ctx, p.session, "Page.navigate", map[string]any{"url": url}, &nav); err != nil {
		return nil, err
	}
	if nav.ErrorText != "" {
		return nil, fmt.Errorf("navigate to %s: %s", url, nav.ErrorText)
	}
	return p, p.WaitFor(ctx, `document.readyState === "complete"`)
}

// Eval evaluates a JavaScript expression in the page (awaiting a promise) and decodes
// its value into out (nil to ignore it).
func (p *Page) Eval(ctx context.Context, expr string, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	err := p.b.call(ctx, p.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &res)
	if err != nil {
		return err
	}
	if d := res.ExceptionDetails; d != nil {
		return fmt.Errorf("evaluate %q: %s %s", expr, d.Text, d.Exception.Description)
	}
	if out == nil || len(res.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(res.Result.Value, out)
}

// WaitFor polls a JavaScript condition until it is true or ctx ends.
func (p *Page) WaitFor(ctx context.Context, cond string) error {
	for {
		var ok bool
		err := p.Eval(ctx, "Boolean("+cond+")", &ok)
		if err == nil && ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New("still false")
			}
			return fmt.Errorf("wait for %s: %w (last: %v)", cond, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Text is the page's visible text.
func (p *Page) Text(ctx context.Context) (string, error) {
	var s string
	err := p.Eval(ctx, "document.body.innerText", &s)
	return s, err
}

// Screenshot is a PNG of the whole page, beyond the window when the page is longer.
func (p *Page) Screenshot(ctx context.Context) ([]byte, error) {
	var metrics struct {
		CSSContentSize struct {
			Width  float64 `json:"width"`
			Height float64 `json:"height"`
		} `json:"cssContentSize"`
	}
	if err := p.b.call(ctx, p.session, "Page.getLayoutMetrics", nil, &metrics); err != nil {
		return nil, err
	}
	var shot struct {
		Data string `json:"data"`
	}
	clip := map[string]any{"x": 0, "y": 0, "width": metrics.CSSContentSize.Width, "height": metrics.CSSContentSize.Height, "scale": 1}
	if err := p.b.call(ctx, p.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true, "clip": clip}, &shot); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(shot.Data)
}

// Errors are the page's uncaught exceptions, console errors and the browser's error
// log entries (a script or style the Content-Security-Policy refused lands here).
func (p *Page) Errors() []string {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	var out []string
	for _, e := range p.b.events {
		if e.SessionID != p.session {
			continue
		}
		switch e.Method {
		case "Runtime.exceptionThrown":
			var ev struct {
				ExceptionDetails struct {
					Text      string `json:"text"`
					Exception struct {
						Description string `json:"description"`
					} `json:"exception"`
				} `json:"exceptionDetails"`
			}
			if json.Unmarshal(e.RawParams, &ev) == nil {
				out = append(out, "exception: "+ev.ExceptionDetails.Text+" "+ev.ExceptionDetails.Exception.Description)
			}
		case "Runtime.consoleAPICalled":
			var ev struct {
				Type string `json:"type"`
				Args []struct {
					Value       any    `json:"value"`
					Description string `json:"description"`
				} `json:"args"`
			}
			if json.Unmarshal(e.RawParams, &ev) == nil && ev.Type == "error" {
				out = append(out, fmt.Sprintf("console.error: %v", ev.Args))
			}
		case "Log.entryAdded":
			var ev struct {
				Entry struct {
					Level  string `json:"level"`
					Source string `json:"source"`
					Text   string `json:"text"`
					URL    string `json:"url"`
				} `json:"entry"`
			}
			if json.Unmarshal(e.RawParams, &ev) == nil && ev.Entry.Level == "error" {
				out = append(out, fmt.Sprintf("%s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		}
	}
	return out
}
