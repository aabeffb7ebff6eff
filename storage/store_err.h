/*
 * The storage's results, one space for both stores (store.h, SQLite;
 * postgres.h, PostgreSQL): 0, or a negative enum store_err. Each store's
 * errmsg function says why in words. A store uses the codes that can
 * happen to it; the comments say which.
 */
#ifndef LEASED_STORE_ERR_H
#define LEASED_STORE_ERR_H

enum store_err {
    STORE_OK = 0,
    STORE_EIO = -1,       /* SQLite: I/O error, disk full, corrupt file */
    STORE_EBUSY = -2,     /* SQLite: locked by another process past the
                             timeout */
    STORE_ECONFLICT = -3, /* SQLite: a stored row was not what the engine
                             saw */
    STORE_ECONFIG = -4,   /* this database cannot be used as it is: a
                             schema from a newer leased; PostgreSQL:
                             another TTL, no permission */
    STORE_ENOMEM = -5,
    STORE_ESYNC = -6,     /* SQLite: fsync failed: what was committed may
                             be lost, and the page cache is no longer the
                             truth */
    STORE_EDOWN = -7,     /* PostgreSQL: no connection, or it broke or
                             timed out (it is closed then): connect
                             again */
    STORE_EFAIL = -8,     /* PostgreSQL: the statement failed; nothing was
                             applied, and the connection is still good */
};

#endif
