/* db.c — the registry: a sqlite3 database (WAL mode, busy timeout, one
 * transaction per change) mapping NAME:TAG to a content-addressed UTH file
 * in the store, and name resolution for every tool.
 *
 *   $store/registry.db            table models (see SCHEMA)
 *   $store/models/<sha256>.uth    the model
 *   $store/models/<sha256>.json   the names of that file (rewritten in the
 *                                 same transaction as every change), from
 *                                 which 'moe-pull repair' rebuilds the db
 *
 * A file enters models/ (rename) and gets its row inside one write
 * transaction, and 'rm' deletes a file inside the transaction that removes
 * its last name, so the two can never cross: no row points at a deleted
 * file, and kill -9 leaves at worst a file without a name (reused by the
 * next pull of the same bytes). */
#include "registry_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct moe_registry {
	sqlite3 *db;
	bool readonly;
	char store[4096];
	char path[4200];
};

#define SCHEMA                                                                                   \
	"CREATE TABLE IF NOT EXISTS models("                                                     \
	" name TEXT NOT NULL, tag TEXT NOT NULL, source TEXT NOT NULL,"                          \
	" revision TEXT NOT NULL DEFAULT '', sha256 TEXT NOT NULL, size INTEGER NOT NULL,"       \
	" architecture TEXT NOT NULL DEFAULT '', parameters INTEGER NOT NULL DEFAULT 0,"         \
	" weight_types TEXT NOT NULL DEFAULT '', created INTEGER NOT NULL,"                      \
	" last_used INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(name, tag));"                        \
	"CREATE INDEX IF NOT EXISTS models_sha ON models(sha256);"

#define COLS "name, tag, source, revision, sha256, size, architecture, parameters, weight_types, created, last_used"

int moe_registry_store_dir(char *buf, size_t n, moe_error *e)
{
	const char *s = getenv("MOE_STORE");
	if (s && *s) {
		int k = snprintf(buf, n, "%s", s);
		if (k < 0 || (size_t)k >= n)
			return moe_err(e, MOE_ERANGE, "MOE_STORE too long");
	} else {
		MOE_TRY(moe_path_data(buf, n, e));
	}
	/* room for "/models/<sha256>.json" in every path buffer */
	if (strlen(buf) > 3900)
		return moe_err(e, MOE_ERANGE, "store directory %.80s... longer than 3900 bytes", buf);
	return 0;
}

static int db_err(moe_registry *r, int src, const char *what, moe_error *e)
{
	const char *msg = r->db ? sqlite3_errmsg(r->db) : sqlite3_errstr(src);
	int base = src & 0xff;
	if (base == SQLITE_CORRUPT || base == SQLITE_NOTADB)
		return moe_err(e, MOE_EFORMAT,
			       "registry database %s is corrupt (%s); move it aside and rebuild it "
			       "with 'moe-pull repair'",
			       r->path, msg);
	if (base == SQLITE_FULL)
		return moe_err(e, MOE_EIO, "registry database %s: %s: disk full", r->path, what);
	if (base == SQLITE_READONLY || base == SQLITE_CANTOPEN || base == SQLITE_PERM)
		return moe_err(e, MOE_EIO, "registry database %s: %s: %s (is the store read-only?)",
			       r->path, what, msg);
	return moe_err(e, MOE_EIO, "registry database %s: %s: %s", r->path, what, msg);
}

static int exec(moe_registry *r, const char *sql, moe_error *e)
{
	int rc = sqlite3_exec(r->db, sql, NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return db_err(r, rc, sql, e);
	return 0;
}

static int open_at(moe_registry **out, const char *store, bool readonly, moe_error *e)
{
	*out = NULL;
	moe_registry *r = calloc(1, sizeof *r);
	if (!r)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	r->readonly = readonly;
	snprintf(r->store, sizeof r->store, "%s", store);
	snprintf(r->path, sizeof r->path, "%s/registry.db", store);
	int rc = 0;
	char models[4200];
	snprintf(models, sizeof models, "%s/models", store);
	struct stat sb;
	if (readonly && stat(r->path, &sb) != 0) {
		rc = moe_err(e, MOE_ENOTFOUND, "%s: no models pulled yet", r->path);
		goto fail;
	}
	if (!readonly && (rc = moe_mkdir_p(models, e)) < 0)
		goto fail;
	/* A reader still opens read-write when it may: a writer killed in the
	 * middle of a transaction leaves a hot journal (or a WAL needing
	 * recovery) that only a connection with write access can roll back;
	 * a read-only connection fails with "attempt to write a readonly
	 * database".  Nothing is written by us on that connection; SQLite only
	 * undoes the dead writer's half-done transaction. */
	bool writable = access(r->path, W_OK) == 0 && access(store, W_OK) == 0;
	int flags = (!readonly ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
			       : writable ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY) |
		    SQLITE_OPEN_NOMUTEX;
	int src = sqlite3_open_v2(r->path, &r->db, flags, NULL);
	if (src != SQLITE_OK) {
		rc = db_err(r, src, "open", e);
		goto fail;
	}
	if (readonly && sqlite3_exec(r->db, "SELECT 1 FROM sqlite_master LIMIT 1", NULL, NULL, NULL) ==
				SQLITE_CANTOPEN) {
		/* A WAL database in a directory we cannot write (a read-only
		 * store) has no -shm file to share: nobody can be writing it,
		 * so read it as immutable. */
		sqlite3_close(r->db);
		r->db = NULL;
		char uri[3 * sizeof r->path + 32] = "file:";
		size_t k = 5;
		for (const char *c = r->path; *c; c++)
			k += (size_t)(*c == '%' || *c == '?' || *c == '#'
					      ? sprintf(uri + k, "%%%02X", (unsigned char)*c)
					      : sprintf(uri + k, "%c", *c));
		strcpy(uri + k, "?immutable=1");
		src = sqlite3_open_v2(uri, &r->db, flags | SQLITE_OPEN_URI, NULL);
		if (src != SQLITE_OK) {
			rc = db_err(r, src, "open", e);
			goto fail;
		}
	}
	sqlite3_busy_timeout(r->db, 30000);
	/* The first statements tell a corrupt file; quick_check catches damage
	 * inside a valid header (the registry is small: it costs nothing). */
	if (!readonly && (rc = exec(r, "PRAGMA journal_mode=WAL", e)) < 0)
		goto fail;
	sqlite3_stmt *st;
	src = sqlite3_prepare_v2(r->db, "PRAGMA quick_check", -1, &st, NULL);
	if (src == SQLITE_OK) {
		src = sqlite3_step(st);
		if (src == SQLITE_ROW) {
			const char *res = (const char *)sqlite3_column_text(st, 0);
			if (res && strcmp(res, "ok")) {
				rc = moe_err(e, MOE_EFORMAT,
					     "registry database %s is corrupt (%s); move it aside and "
					     "rebuild it with 'moe-pull repair'",
					     r->path, res);
				sqlite3_finalize(st);
				goto fail;
			}
			src = SQLITE_OK;
		} else if (src == SQLITE_DONE)
			src = SQLITE_OK;
		sqlite3_finalize(st);
	}
	if (src != SQLITE_OK) {
		rc = db_err(r, src, "check", e);
		goto fail;
	}
	if (!readonly && (rc = exec(r, SCHEMA "PRAGMA user_version=1;", e)) < 0)
		goto fail;
	*out = r;
	return 0;
fail:
	moe_registry_close(r);
	return rc;
}

int moe_registry_open(moe_registry **out, bool readonly, moe_error *e)
{
	char store[4096];
	MOE_TRY(moe_registry_store_dir(store, sizeof store, e));
	return open_at(out, store, readonly, e);
}

void moe_registry_close(moe_registry *r)
{
	if (!r)
		return;
	sqlite3_close(r->db);
	free(r);
}

static void col(sqlite3_stmt *st, int i, char *dst, size_t n)
{
	const char *s = (const char *)sqlite3_column_text(st, i);
	snprintf(dst, n, "%s", s ? s : "");
}

static void row_entry(moe_registry *r, sqlite3_stmt *st, moe_registry_entry *en)
{
	memset(en, 0, sizeof *en);
	col(st, 0, en->name, sizeof en->name);
	col(st, 1, en->tag, sizeof en->tag);
	col(st, 2, en->source, sizeof en->source);
	col(st, 3, en->revision, sizeof en->revision);
	col(st, 4, en->sha256, sizeof en->sha256);
	en->size = (uint64_t)sqlite3_column_int64(st, 5);
	col(st, 6, en->architecture, sizeof en->architecture);
	en->parameters = (uint64_t)sqlite3_column_int64(st, 7);
	col(st, 8, en->weight_types, sizeof en->weight_types);
	en->created = sqlite3_column_int64(st, 9);
	en->last_used = sqlite3_column_int64(st, 10);
	snprintf(en->path, sizeof en->path, "%.3900s/models/%.64s.uth", r->store, en->sha256);
}

int moe_registry_list(moe_registry *r, moe_registry_entry **out, size_t *n, moe_error *e)
{
	*out = NULL;
	*n = 0;
	sqlite3_stmt *st;
	int src = sqlite3_prepare_v2(r->db, "SELECT " COLS " FROM models ORDER BY name, tag", -1, &st,
				     NULL);
	if (src != SQLITE_OK) {
		/* a read-only open of a fresh store has no table yet */
		if (r->readonly && strstr(sqlite3_errmsg(r->db), "no such table"))
			return 0;
		return db_err(r, src, "list", e);
	}
	size_t cap = 0;
	int rc = 0;
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		if (*n == cap) {
			cap = cap ? cap * 2 : 16;
			moe_registry_entry *p = realloc(*out, cap * sizeof *p);
			if (!p) {
				rc = moe_err(e, MOE_ENOMEM, "out of memory");
				break;
			}
			*out = p;
		}
		row_entry(r, st, &(*out)[(*n)++]);
	}
	if (rc == 0 && src != SQLITE_DONE)
		rc = db_err(r, src, "list", e);
	sqlite3_finalize(st);
	if (rc < 0) {
		free(*out);
		*out = NULL;
		*n = 0;
	}
	return rc;
}

static bool name_char_ok(char c, bool slash)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_' || c == '.' || (slash && c == '/');
}

int moe_registry_split_name(const char *s, char *name, size_t nn, char *tag, size_t tn,
			    moe_error *e)
{
	const char *colon = strrchr(s, ':');
	size_t len = colon ? (size_t)(colon - s) : strlen(s);
	if (len == 0 || len >= nn || s[0] == '/' || s[0] == '.' || strstr(s, "//") ||
	    (len && s[len - 1] == '/'))
		return moe_err(e, MOE_EINVAL, "'%s' is not a model name (NAME or NAME:TAG)", s);
	for (size_t i = 0; i < len; i++)
		if (!name_char_ok(s[i], true))
			return moe_err(e, MOE_EINVAL, "'%s' is not a model name (NAME or NAME:TAG)", s);
	memcpy(name, s, len);
	name[len] = '\0';
	tag[0] = '\0';
	if (colon) {
		const char *t = colon + 1;
		if (!*t || strlen(t) >= tn)
			return moe_err(e, MOE_EINVAL, "'%s': empty or long tag", s);
		for (const char *c = t; *c; c++)
			if (!name_char_ok(*c, false))
				return moe_err(e, MOE_EINVAL, "'%s': bad character in the tag", s);
		strcpy(tag, t);
	}
	return 0;
}

/* The part after the last '/'. */
static const char *short_name(const char *n)
{
	const char *s = strrchr(n, '/');
	return s ? s + 1 : n;
}

static void append_names(char *buf, size_t n, const moe_registry_entry *v, const size_t *idx,
			 size_t k)
{
	size_t used = strlen(buf);
	for (size_t i = 0; i < k && used + 8 < n; i++) {
		if (i == 12) {
			snprintf(buf + used, n - used, ", ... (%zu in all)", k);
			return;
		}
		int w = snprintf(buf + used, n - used, "%s%s:%s", i ? ", " : "", v[idx[i]].name,
				 v[idx[i]].tag);
		if (w < 0)
			return;
		used += (size_t)w;
		if (used >= n)
			return;
	}
}

/* Find `arg` among the entries; *which is the index. */
static int match(const moe_registry_entry *v, size_t n, const char *arg, size_t *which,
		 moe_error *e)
{
	char name[256], tag[128];
	MOE_TRY(moe_registry_split_name(arg, name, sizeof name, tag, sizeof tag, e));
	size_t *hit = malloc((n ? n : 1) * sizeof *hit);
	if (!hit)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	size_t k = 0;
	/* exact names first, then the short name (after the last '/') */
	for (int pass = 0; pass < 2 && k == 0; pass++)
		for (size_t i = 0; i < n; i++) {
			bool nm = pass == 0 ? !strcmp(v[i].name, name)
					    : !strchr(name, '/') && !strcmp(short_name(v[i].name), name);
			if (nm && (!tag[0] || !strcmp(v[i].tag, tag)))
				hit[k++] = i;
		}
	int rc = 0;
	if (k == 1) {
		*which = hit[0];
	} else if (k > 1) {
		/* several tags of one name: "latest" wins */
		size_t latest = SIZE_MAX;
		bool one_name = true;
		for (size_t i = 0; i < k; i++) {
			one_name &= !strcmp(v[hit[i]].name, v[hit[0]].name);
			if (!strcmp(v[hit[i]].tag, "latest"))
				latest = hit[i];
		}
		if (one_name && latest != SIZE_MAX) {
			*which = latest;
		} else {
			char list[1500] = "";
			append_names(list, sizeof list, v, hit, k);
			rc = moe_err(e, MOE_EINVAL, "model name '%s' is ambiguous: %s", arg, list);
		}
	} else {
		for (size_t i = 0; i < n; i++)
			hit[i] = i;
		char list[1500] = "";
		append_names(list, sizeof list, v, hit, n);
		if (n)
			rc = moe_err(e, MOE_ENOTFOUND, "no model named '%s'; the registry has: %s", arg, list);
		else
			rc = moe_err(e, MOE_ENOTFOUND,
				     "no model named '%s': the registry is empty ('moe-pull SOURCE' "
				     "adds one)",
				     arg);
	}
	free(hit);
	return rc;
}

int moe_registry_get(moe_registry *r, const char *name, moe_registry_entry *out, moe_error *e)
{
	moe_registry_entry *v;
	size_t n, w;
	MOE_TRY(moe_registry_list(r, &v, &n, e));
	int rc = match(v, n, name, &w, e);
	if (rc == 0)
		*out = v[w];
	free(v);
	return rc;
}

json_t *moe_registry_entry_json(const moe_registry_entry *en)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:s, s:I, s:s, s:I, s:I, s:s}", "name",
			 en->name, "tag", en->tag, "source", en->source, "revision", en->revision,
			 "sha256", en->sha256, "size", (json_int_t)en->size, "architecture",
			 en->architecture, "parameters", (json_int_t)en->parameters, "weight_types",
			 en->weight_types, "created", (json_int_t)en->created, "last_used",
			 (json_int_t)en->last_used, "path", en->path);
}

/* ---------------------------------------------------------- changes */

static int begin(moe_registry *r, moe_error *e)
{
	if (r->readonly)
		return moe_err(e, MOE_EINVAL, "registry opened read-only");
	return exec(r, "BEGIN IMMEDIATE", e);
}

static void rollback(moe_registry *r)
{
	sqlite3_exec(r->db, "ROLLBACK", NULL, NULL, NULL);
}

static void store_path(moe_registry *r, const char *sha, const char *ext, char *buf, size_t n)
{
	snprintf(buf, n, "%s/models/%s.%s", r->store, sha, ext);
}

static int sync_dir(const char *dir, moe_error *e)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return moe_err(e, MOE_EIO, "%s: %s", dir, strerror(errno));
	fsync(fd);
	close(fd);
	return 0;
}

/* Rewrite models/<sha>.json from the rows (inside the caller's
 * transaction), or remove it with the file when no row is left. */
static int sidecar(moe_registry *r, const char *sha, bool *removed, moe_error *e)
{
	char json_path[4400], uth_path[4400];
	store_path(r, sha, "json", json_path, sizeof json_path);
	store_path(r, sha, "uth", uth_path, sizeof uth_path);
	if (removed)
		*removed = false;
	sqlite3_stmt *st;
	int src = sqlite3_prepare_v2(r->db, "SELECT " COLS " FROM models WHERE sha256=? ORDER BY name, tag",
				     -1, &st, NULL);
	if (src != SQLITE_OK)
		return db_err(r, src, "select", e);
	sqlite3_bind_text(st, 1, sha, -1, SQLITE_STATIC);
	json_t *names = json_array();
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		moe_registry_entry en;
		row_entry(r, st, &en);
		json_t *j = moe_registry_entry_json(&en);
		json_object_del(j, "path");
		json_array_append_new(names, j);
	}
	sqlite3_finalize(st);
	if (src != SQLITE_DONE) {
		json_decref(names);
		return db_err(r, src, "select", e);
	}
	int rc = 0;
	if (json_array_size(names) == 0) {
		if (unlink(uth_path) != 0 && errno != ENOENT)
			rc = moe_err(e, MOE_EIO, "%s: cannot remove: %s", uth_path, strerror(errno));
		else if (removed)
			*removed = true;
		unlink(json_path);
	} else {
		json_t *doc = json_pack("{s:s, s:o}", "sha256", sha, "names", names);
		names = NULL;
		char *s = json_dumps(doc, JSON_INDENT(1));
		json_decref(doc);
		moe_out o;
		rc = s ? moe_out_open(&o, json_path, e) : moe_err(e, MOE_ENOMEM, "out of memory");
		if (rc == 0) {
			rc = moe_out_write(&o, s, strlen(s), e);
			if (rc == 0)
				rc = moe_out_commit(&o, e);
			else
				moe_out_abort(&o);
		}
		free(s);
	}
	json_decref(names);
	return rc;
}

static int insert(moe_registry *r, const moe_registry_entry *en, moe_error *e)
{
	sqlite3_stmt *st;
	int src = sqlite3_prepare_v2(r->db,
				     "INSERT OR REPLACE INTO models(" COLS
				     ") VALUES(?,?,?,?,?,?,?,?,?,?,?)",
				     -1, &st, NULL);
	if (src != SQLITE_OK)
		return db_err(r, src, "insert", e);
	sqlite3_bind_text(st, 1, en->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, en->tag, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, en->source, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, en->revision, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, en->sha256, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 6, (sqlite3_int64)en->size);
	sqlite3_bind_text(st, 7, en->architecture, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 8, (sqlite3_int64)en->parameters);
	sqlite3_bind_text(st, 9, en->weight_types, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 10, en->created);
	sqlite3_bind_int64(st, 11, en->last_used);
	src = sqlite3_step(st);
	sqlite3_finalize(st);
	return src == SQLITE_DONE ? 0 : db_err(r, src, "insert", e);
}

/* The sha256 a NAME:TAG row has now, "" if none. */
static int current_sha(moe_registry *r, const char *name, const char *tag, char sha[65],
		       moe_error *e)
{
	sqlite3_stmt *st;
	sha[0] = '\0';
	int src = sqlite3_prepare_v2(r->db, "SELECT sha256 FROM models WHERE name=? AND tag=?", -1, &st,
				     NULL);
	if (src != SQLITE_OK)
		return db_err(r, src, "select", e);
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, tag, -1, SQLITE_STATIC);
	src = sqlite3_step(st);
	if (src == SQLITE_ROW)
		col(st, 0, sha, 65);
	sqlite3_finalize(st);
	return src == SQLITE_ROW || src == SQLITE_DONE ? 0 : db_err(r, src, "select", e);
}

/* Insert/replace a row inside an open transaction and fix both sidecars. */
static int put_row(moe_registry *r, const moe_registry_entry *en, moe_error *e)
{
	char old[65];
	MOE_TRY(current_sha(r, en->name, en->tag, old, e));
	MOE_TRY(insert(r, en, e));
	MOE_TRY(sidecar(r, en->sha256, NULL, e));
	if (old[0] && strcmp(old, en->sha256))
		MOE_TRY(sidecar(r, old, NULL, e));
	return 0;
}

static int commit(moe_registry *r, moe_error *e)
{
	int rc = exec(r, "COMMIT", e);
	if (rc < 0)
		rollback(r);
	return rc;
}

int moe_registry_add(moe_registry *r, const char *tmp_uth, moe_registry_entry *en,
		     moe_error *e)
{
	char dest[4400], dir[4200];
	store_path(r, en->sha256, "uth", dest, sizeof dest);
	snprintf(dir, sizeof dir, "%s/models", r->store);
	snprintf(en->path, sizeof en->path, "%.4000s", dest);
	MOE_TRY(begin(r, e));
	int rc = 0;
	if (rename(tmp_uth, dest) != 0)
		rc = moe_err(e, MOE_EIO, "%s: cannot move into the store: %s", dest, strerror(errno));
	if (rc == 0)
		rc = sync_dir(dir, e);
	if (rc == 0)
		rc = put_row(r, en, e);
	if (rc == 0)
		rc = commit(r, e);
	else
		rollback(r);
	return rc;
}

int moe_registry_rm(moe_registry *r, const char *name, bool *file_removed, moe_error *e)
{
	if (file_removed)
		*file_removed = false;
	MOE_TRY(begin(r, e));
	moe_registry_entry en;
	int rc = moe_registry_get(r, name, &en, e);
	sqlite3_stmt *st = NULL;
	if (rc == 0) {
		int src = sqlite3_prepare_v2(r->db, "DELETE FROM models WHERE name=? AND tag=?", -1, &st,
					     NULL);
		if (src == SQLITE_OK) {
			sqlite3_bind_text(st, 1, en.name, -1, SQLITE_STATIC);
			sqlite3_bind_text(st, 2, en.tag, -1, SQLITE_STATIC);
			src = sqlite3_step(st);
		}
		sqlite3_finalize(st);
		if (src != SQLITE_DONE)
			rc = db_err(r, src, "delete", e);
	}
	/* the file goes inside the transaction: a concurrent pull of the same
	 * bytes waits for us and then renames its copy into place */
	if (rc == 0)
		rc = sidecar(r, en.sha256, file_removed, e);
	if (rc == 0)
		rc = commit(r, e);
	else
		rollback(r);
	return rc;
}

int moe_registry_tag(moe_registry *r, const char *name, const char *newname, moe_error *e)
{
	char nn[256], nt[128];
	MOE_TRY(moe_registry_split_name(newname, nn, sizeof nn, nt, sizeof nt, e));
	MOE_TRY(begin(r, e));
	moe_registry_entry en;
	int rc = moe_registry_get(r, name, &en, e);
	if (rc == 0) {
		snprintf(en.name, sizeof en.name, "%s", nn);
		snprintf(en.tag, sizeof en.tag, "%s", nt[0] ? nt : "latest");
		en.created = (int64_t)time(NULL);
		rc = put_row(r, &en, e);
	}
	if (rc == 0)
		rc = commit(r, e);
	else
		rollback(r);
	return rc;
}

/* ------------------------------------------------------------ resolve */

int moe_registry_resolve(const char *arg, char **path, moe_error *e)
{
	*path = NULL;
	struct stat st;
	if (stat(arg, &st) == 0) {
		if (!(*path = strdup(arg)))
			return moe_err(e, MOE_ENOMEM, "out of memory");
		return 0;
	}
	int err = errno;
	/* Something that can only be a path: say the file is missing. */
	size_t len = strlen(arg);
	bool pathlike = arg[0] == '/' || arg[0] == '.' ||
			(len > 4 && (!strcmp(arg + len - 4, ".uth") || (len > 5 && !strcmp(arg + len - 5, ".gguf"))));
	if (pathlike)
		return moe_err(e, MOE_ENOTFOUND, "%s: %s", arg, strerror(err));
	char name[256], tag[128];
	if (moe_registry_split_name(arg, name, sizeof name, tag, sizeof tag, NULL) < 0)
		return moe_err(e, MOE_ENOTFOUND, "%s: no such file, and not a model name", arg);
	char store[4096], dbp[4200];
	MOE_TRY(moe_registry_store_dir(store, sizeof store, e));
	snprintf(dbp, sizeof dbp, "%s/registry.db", store);
	if (stat(dbp, &st) != 0)
		return moe_err(e, MOE_ENOTFOUND,
			       "%s: no such file, and no model of that name (no models pulled yet; "
			       "'moe-pull SOURCE' adds one)",
			       arg);
	/* Look up read-only (no schema work, never waits for a pull's write
	 * transaction); record the use afterwards, best effort. */
	moe_registry *r;
	MOE_TRY(open_at(&r, store, true, e));
	moe_registry_entry en;
	int rc = moe_registry_get(r, arg, &en, e);
	moe_registry_close(r);
	if (rc == MOE_ENOTFOUND)
		moe_err_prefix(e, "%s: no such file", arg);
	if (rc == 0 && stat(en.path, &st) != 0)
		rc = moe_err(e, MOE_ENOTFOUND, "model %s:%s: its file %s is missing (%s); pull it again",
			     en.name, en.tag, en.path, strerror(errno));
	sqlite3 *db = NULL;
	if (rc == 0 && access(store, W_OK) == 0 && access(dbp, W_OK) == 0 &&
	    sqlite3_open_v2(dbp, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) == SQLITE_OK) {
		sqlite3_stmt *s;
		sqlite3_busy_timeout(db, 200);
		if (sqlite3_prepare_v2(db, "UPDATE models SET last_used=? WHERE name=? AND tag=?", -1, &s,
				       NULL) == SQLITE_OK) {
			sqlite3_bind_int64(s, 1, (sqlite3_int64)time(NULL));
			sqlite3_bind_text(s, 2, en.name, -1, SQLITE_STATIC);
			sqlite3_bind_text(s, 3, en.tag, -1, SQLITE_STATIC);
			sqlite3_step(s);
			sqlite3_finalize(s);
		}
	}
	sqlite3_close(db);
	if (rc == 0 && !(*path = strdup(en.path)))
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
	return rc;
}

/* ------------------------------------------------------------- repair */

static int restore_sidecar(moe_registry *r, const char *path, size_t *n, moe_error *e)
{
	json_error_t je;
	json_t *doc = json_load_file(path, 0, &je);
	const char *sha = json_string_value(json_object_get(doc, "sha256"));
	json_t *names = json_object_get(doc, "names");
	int rc = 0;
	if (!sha || !json_is_array(names) || strlen(sha) != 64) {
		moe_log(MOE_LOG_WARN, "%s: not a registry record; skipped", path);
		json_decref(doc);
		return 0;
	}
	char uth[4400];
	store_path(r, sha, "uth", uth, sizeof uth);
	struct stat st;
	if (stat(uth, &st) != 0) {
		moe_log(MOE_LOG_WARN, "%s: its model file is gone; skipped", path);
		json_decref(doc);
		return 0;
	}
	size_t i;
	json_t *j;
	json_array_foreach(names, i, j) {
		moe_registry_entry en = {0};
#define S(f) snprintf(en.f, sizeof en.f, "%s", json_string_value(json_object_get(j, #f)) ? json_string_value(json_object_get(j, #f)) : "")
		S(name); S(tag); S(source); S(revision); S(architecture); S(weight_types);
#undef S
		snprintf(en.sha256, sizeof en.sha256, "%s", sha);
		en.size = (uint64_t)st.st_size;
		en.parameters = (uint64_t)json_integer_value(json_object_get(j, "parameters"));
		en.created = json_integer_value(json_object_get(j, "created"));
		en.last_used = json_integer_value(json_object_get(j, "last_used"));
		char nn[256], nt[128];
		if (moe_registry_split_name(en.name, nn, sizeof nn, nt, sizeof nt, NULL) < 0 || !en.tag[0])
			continue;
		if ((rc = insert(r, &en, e)) < 0)
			break;
		(*n)++;
	}
	json_decref(doc);
	return rc;
}

int moe_registry_repair(size_t *n_restored, char *moved_to, size_t moved_n, moe_error *e)
{
	*n_restored = 0;
	if (moved_n)
		moved_to[0] = '\0';
	char store[4096], dbp[4200];
	MOE_TRY(moe_registry_store_dir(store, sizeof store, e));
	snprintf(dbp, sizeof dbp, "%s/registry.db", store);
	struct stat st;
	if (stat(dbp, &st) == 0) {
		char aside[4300];
		snprintf(aside, sizeof aside, "%s.corrupt-%lld", dbp, (long long)time(NULL));
		if (rename(dbp, aside) != 0)
			return moe_err(e, MOE_EIO, "%s: cannot move aside: %s", dbp, strerror(errno));
		for (int i = 0; i < 2; i++) {
			char a[4400], b[4400];
			snprintf(a, sizeof a, "%s%s", dbp, i ? "-shm" : "-wal");
			snprintf(b, sizeof b, "%s%s", aside, i ? "-shm" : "-wal");
			rename(a, b);
		}
		if (moved_n)
			snprintf(moved_to, moved_n, "%s", aside);
	}
	moe_registry *r;
	MOE_TRY(open_at(&r, store, false, e));
	char dir[4200];
	snprintf(dir, sizeof dir, "%s/models", store);
	DIR *d = opendir(dir);
	int rc = d ? begin(r, e) : moe_err(e, MOE_EIO, "%s: %s", dir, strerror(errno));
	struct dirent *de;
	while (rc == 0 && (de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (len != 64 + 5 || strcmp(de->d_name + 64, ".json"))
			continue;
		char p[4400];
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		rc = restore_sidecar(r, p, n_restored, e);
	}
	if (d)
		closedir(d);
	if (rc == 0)
		rc = commit(r, e);
	else if (d)
		rollback(r);
	moe_registry_close(r);
	return rc;
}
