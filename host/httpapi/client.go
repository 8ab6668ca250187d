package httpapi

// The admin client: what `ffscan status`, `ffscan reload` and
// `ffscan plugins reload` send to a running host.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/explain"
)

// Client talks to a running host's HTTP listener.
type Client struct {
	// Addr is the listener's host:port.
	Addr string
	// Token is the admin token (admintoken.Read), sent with Post.
	Token string
}

// Post sends an admin request (with the admin token) and decodes the JSON
// answer into out. It returns the HTTP status; a refusal (401, 403, 503)
// and an answer that is not JSON are errors that quote the host.
func (c Client) Post(path string, timeout time.Duration, out any) (int, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+c.Addr+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set(ClientHeader, "cli")
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	switch resp.StatusCode {
	case http.StatusForbidden, http.StatusUnauthorized, http.StatusServiceUnavailable:
		return resp.StatusCode, fmt.Errorf("the host refused: %s", strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return resp.StatusCode, fmt.Errorf("POST %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return resp.StatusCode, nil
}

// RawStatus reads /v1/status as the host sent it.
func (c Client) RawStatus(timeout time.Duration) ([]byte, error) {
	resp, err := (&http.Client{Timeout: timeout}).Get("http://" + c.Addr + "/v1/status")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/status: %s", resp.Status)
	}
	return body, nil
}

// Status reads and decodes /v1/status.
func (c Client) Status(timeout time.Duration) (StatusDoc, error) {
	body, err := c.RawStatus(timeout)
	if err != nil {
		return StatusDoc{}, err
	}
	var doc StatusDoc
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&doc); err != nil {
		return StatusDoc{}, fmt.Errorf("decode status: %w", err)
	}
	return doc, nil
}

// Explain reads /v1/explain/{id}: the raw JSON and the decoded report.
func (c Client) Explain(id string, timeout time.Duration) ([]byte, *explain.Report, error) {
	resp, err := (&http.Client{Timeout: timeout}).Get("http://" + c.Addr + "/v1/explain/" + url.PathEscape(id))
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, nil, fmt.Errorf("explain: %s", e.Error)
		}
		return nil, nil, fmt.Errorf("GET /v1/explain: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var rep explain.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		return nil, nil, fmt.Errorf("decode explain: %w", err)
	}
	return body, &rep, nil
}

// Audit reads GET /v1/audit with query q.
func (c Client) Audit(q url.Values, timeout time.Duration) ([]audit.Entry, error) {
	resp, err := (&http.Client{Timeout: timeout}).Get("http://" + c.Addr + "/v1/audit?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("GET /v1/audit: %s: %s", resp.Status, e.Error)
		}
		return nil, fmt.Errorf("GET /v1/audit: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var out struct {
		Entries []audit.Entry `json:"entries"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("GET /v1/audit: %w", err)
	}
	return out.Entries, nil
}
