#include "common/rules.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dsock_glob_match(const char *pat, const char *s)
{
	const char *star = NULL, *mark = NULL;

	while (*s) {
		if (*pat == '?' || *pat == *s) {
			pat++, s++;
		} else if (*pat == '*') {
			star = pat++;
			mark = s;
		} else if (star) {
			pat = star + 1;
			s = ++mark;
		} else {
			return 0;
		}
	}
	while (*pat == '*')
		pat++;
	return *pat == '\0';
}

static void to_mapped(const struct sockaddr *sa, uint8_t out[16], uint16_t *port)
{
	memset(out, 0, 16);
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &in->sin_addr, 4);
		*port = ntohs(in->sin_port);
	} else {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		memcpy(out, &in6->sin6_addr, 16);
		*port = ntohs(in6->sin6_port);
	}
}

static int prefix_match(const uint8_t *a, const uint8_t *b, unsigned prefix)
{
	unsigned full = prefix / 8, rest = prefix % 8;

	if (memcmp(a, b, full))
		return 0;
	if (!rest)
		return 1;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (a[full] & mask) == (b[full] & mask);
}

static int parse_port(const char *s, uint16_t *out)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (end == s || v < 0 || v > 65535)
		return -1;
	*out = (uint16_t)v;
	return (int)(end - s);
}

static int parse_addr(struct dsock_rule *r, const char *arg)
{
	char ip[64];
	const char *slash = strchr(arg, '/');
	size_t iplen = slash ? (size_t)(slash - arg) : strlen(arg);
	long prefix = -1;
	struct in_addr a4;

	if (iplen >= sizeof(ip))
		return -1;
	memcpy(ip, arg, iplen);
	ip[iplen] = '\0';
	if (slash) {
		char *end;
		prefix = strtol(slash + 1, &end, 10);
		if (end == slash + 1 || *end)
			return -1;
	}
	memset(r->addr, 0, 16);
	if (inet_pton(AF_INET, ip, &a4) == 1) {
		if (prefix > 32)
			return -1;
		r->addr[10] = r->addr[11] = 0xff;
		memcpy(r->addr + 12, &a4, 4);
		r->prefix = (uint8_t)(96 + (prefix < 0 ? 32 : prefix));
	} else if (inet_pton(AF_INET6, ip, r->addr) == 1) {
		if (prefix > 128)
			return -1;
		r->prefix = (uint8_t)(prefix < 0 ? 128 : prefix);
	} else {
		return -1;
	}
	return 0;
}

int dsock_rules_parse_line(struct dsock_rules *rules, const char *line,
			   char *err, size_t errlen)
{
	char verb[16], kind[16], arg[128], extra[2];
	struct dsock_rule r;
	int n;

	while (isspace((unsigned char)*line))
		line++;
	if (!*line || *line == '#')
		return 0;
	memset(&r, 0, sizeof(r));
	n = sscanf(line, "%15s %15s %127s %1s", verb, kind, arg, extra);
	if (n != 3 || (strcmp(verb, "allow") && strcmp(verb, "deny"))) {
		snprintf(err, errlen, "expected 'allow|deny program|addr|port VALUE'");
		return -EINVAL;
	}
	r.allow = !strcmp(verb, "allow");
	if (!strcmp(kind, "program")) {
		if (strlen(arg) >= sizeof(r.glob) || strchr(arg, '/')) {
			snprintf(err, errlen, "bad program pattern '%s' (a file name glob)", arg);
			return -EINVAL;
		}
		r.kind = DSOCK_RULE_PROGRAM;
		strcpy(r.glob, arg);
	} else if (!strcmp(kind, "addr")) {
		r.kind = DSOCK_RULE_ADDR;
		if (parse_addr(&r, arg)) {
			snprintf(err, errlen, "bad address '%s' (want CIDR)", arg);
			return -EINVAL;
		}
	} else if (!strcmp(kind, "port")) {
		int a, b = 0;
		r.kind = DSOCK_RULE_PORT;
		a = parse_port(arg, &r.port_lo);
		r.port_hi = r.port_lo;
		if (a > 0 && arg[a] == '-')
			b = parse_port(arg + a + 1, &r.port_hi);
		if (a <= 0 || (arg[a] && (arg[a] != '-' || b <= 0 || arg[a + 1 + b])) ||
		    r.port_hi < r.port_lo) {
			snprintf(err, errlen, "bad port '%s' (want N or N-M)", arg);
			return -EINVAL;
		}
	} else {
		snprintf(err, errlen, "unknown rule kind '%s'", kind);
		return -EINVAL;
	}
	if (rules->n >= DSOCK_RULES_MAX) {
		snprintf(err, errlen, "more than %d rules", DSOCK_RULES_MAX);
		return -ENOSPC;
	}
	rules->r[rules->n++] = r;
	return 0;
}

int dsock_rules_each_line(const char *text, const char *source, size_t max_line,
			  int (*fn)(void *ctx, const char *line, char *msg, size_t msglen), void *ctx,
			  char *err, size_t errlen)
{
	char line[max_line], msg[400];
	int lineno = 0;

	while (*text) {
		size_t len = strcspn(text, "\n;");
		lineno++;
		if (len >= max_line) {
			snprintf(err, errlen, "%s:%d: line too long", source, lineno);
			return -EINVAL;
		}
		memcpy(line, text, len);
		line[len] = '\0';
		int rc = fn(ctx, line, msg, sizeof(msg));
		if (rc) {
			snprintf(err, errlen, "%s:%d: %s", source, lineno, msg);
			return rc;
		}
		text += len;
		if (*text)
			text++;
	}
	return 0;
}

static int parse_line_of(void *rules, const char *line, char *msg, size_t msglen)
{
	return dsock_rules_parse_line(rules, line, msg, msglen);
}

int dsock_rules_parse_text(struct dsock_rules *rules, const char *text,
			   const char *source, char *err, size_t errlen)
{
	return dsock_rules_each_line(text, source, 256, parse_line_of, rules, err, errlen);
}

int dsock_rules_program_allowed(const struct dsock_rules *rules, const char *prog)
{
	for (int i = 0; i < rules->n; i++)
		if (rules->r[i].kind == DSOCK_RULE_PROGRAM &&
		    dsock_glob_match(rules->r[i].glob, prog))
			return rules->r[i].allow;
	return 1;
}

int dsock_rules_name_ports(const struct dsock_rules *rules)
{
	for (int i = 0; i < rules->n; i++)
		if (rules->r[i].kind == DSOCK_RULE_PORT)
			return 1;
	return 0;
}

int dsock_rules_conn_allowed(const struct dsock_rules *rules,
			     const struct sockaddr *local, const struct sockaddr *peer,
			     int *rule)
{
	uint8_t la[16], pa[16];
	uint16_t lport = 0, pport = 0;

	if (local)
		to_mapped(local, la, &lport);
	if (peer)
		to_mapped(peer, pa, &pport);
	for (int i = 0; i < rules->n; i++) {
		const struct dsock_rule *r = &rules->r[i];
		int hit = 0;

		if (r->kind == DSOCK_RULE_ADDR)
			hit = peer && prefix_match(r->addr, pa, r->prefix);
		else if (r->kind == DSOCK_RULE_PORT)
			hit = (local && lport >= r->port_lo && lport <= r->port_hi) ||
			      (peer && pport >= r->port_lo && pport <= r->port_hi);
		if (hit) {
			*rule = i;
			return r->allow;
		}
	}
	*rule = -1;
	return 1;
}
